"""A Ray driver in a process of its own, asked questions one JSON line at a time.

Tests judge a scenario through Ray's own state as well as the API's: which
nodes joined (`ray.nodes()`) and where tasks ran. Ray stays out of the test
process: the driver is another Ray process of the tier (loopback env, own
session, stopped with the rest).

    {"op": "nodes"}                               -> {"nodes": [{"id", "alive", "pod", "cpus"}]}
    {"op": "submit", "count": n, "cpus": c, "hold": path}
                                                  -> {"submitted": n}; each task waits for
                                                     `path` to exist, then says where it ran
    {"op": "results", "timeout": s}               -> {"results": [pod name, ...]}

Every start of a task (Ray retries one whose node died) appends a line
"<task index> <pod>" to `<hold>.starts` (`starts()` reads it): which tasks
run where, and how often each was started.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from .node import POD_LABEL
from .procs import RayProcess, python

STARTS_SUFFIX = ".starts"


def starts(hold: Path) -> list[tuple[int, str]]:
    """(task index, pod) for every start of a task held on `hold`, in order."""
    try:
        text = Path(str(hold) + STARTS_SUFFIX).read_text()
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        index, _, pod = line.partition(" ")
        if index.isdigit():  # a line still being written has no pod yet: skipped
            out.append((int(index), pod))
    return out


def argv(gcs_address: str, head_temp_dir: str) -> list[str]:
    return [python(), "-m", "devstack.ray.driver", gcs_address, head_temp_dir]


def ask(proc: RayProcess, request: dict[str, Any]) -> dict[str, Any]:
    """One request to a running driver, its answer back (errors raised with its log)."""
    assert proc.popen.stdin is not None and proc.popen.stdout is not None
    try:
        proc.popen.stdin.write(json.dumps(request) + "\n")
        proc.popen.stdin.flush()
        line = proc.popen.stdout.readline()
    except OSError as e:
        raise proc.failure(f"unreachable ({e}) asked {request}") from e
    if not line:
        raise proc.failure(f"exited ({proc.exited()}) asked {request}")
    answer = json.loads(line)
    if "error" in answer:
        raise proc.failure(f"failed {request}: {answer['error']}")
    return answer


def _serve(gcs_address: str, head_temp_dir: str) -> None:  # pragma: no cover - runs in the driver
    import os
    import time

    # Answers get stdout to themselves: Ray prints banners and warnings there.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    import ray

    # Several raylets share 127.0.0.1: the head's temp dir picks the head's, so the
    # driver survives any worker going away.
    ray.init(address=gcs_address, _node_ip_address="127.0.0.1", _temp_dir=head_temp_dir,
             logging_level="warning", log_to_driver=False)

    @ray.remote
    def held(hold: str, index: int) -> str:
        pod = os.environ.get("RAY_CLOUD_INSTANCE_ID", "")
        # One write of a short line with O_APPEND: starts on different workers never
        # interleave. The suffix is STARTS_SUFFIX's (this function is shipped to Ray by value).
        fd = os.open(hold + ".starts", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, f"{index} {pod}\n".encode())
        os.close(fd)
        while not os.path.exists(hold):
            time.sleep(0.1)
        return pod

    refs: list[Any] = []
    for line in sys.stdin:
        request = json.loads(line)
        try:
            op = request["op"]
            if op == "nodes":
                answer: dict[str, Any] = {"nodes": [
                    {"id": n["NodeID"], "alive": n["Alive"], "pod": n.get("Labels", {}).get(POD_LABEL, ""),
                     "cpus": n.get("Resources", {}).get("CPU", 0)} for n in ray.nodes()]}
            elif op == "submit":
                first = request.get("first_index", len(refs))
                refs += [held.options(num_cpus=request["cpus"]).remote(request["hold"], first + i)
                         for i in range(request["count"])]
                answer = {"submitted": request["count"]}
            elif op == "results":
                answer = {"results": ray.get(refs, timeout=request["timeout"])}
                refs = []
            else:
                answer = {"error": f"unknown op {op!r}"}
        except Exception as e:
            answer = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(answer), file=answers, flush=True)


if __name__ == "__main__":  # pragma: no cover
    _serve(sys.argv[1], sys.argv[2])
