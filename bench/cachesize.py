"""What the controller's caches keep per pod: bytes held by N trimmed pods and Workloads.

No servers. Builds N Running KubeRay worker pods and their admitted Workloads
(testkit/controller_objects, the unit tests' objects), ten to a second of
creation time as KubeRay makes them, serialises each as the API server would
send it, then parses and trims each through the caches' own transforms
(`controller.caches.slim_pod`, `slim_workload`) with tracemalloc on. Prints the
bytes still allocated per pod and Workload: the objects, the strings they share
and the interpreter's table of interned strings.

    python bench/cachesize.py [--sizes 5000,12000] [--not-interned FIELD,...]

--not-interned replaces the fields whose string values the caches leave
uninterned (`controller.caches._NOT_INTERNED`), to weigh that choice.

Each size runs in a process of its own, so that one size's interned strings do
not weigh in the next. To compare with another commit, copy this file into a
checkout of it and run it there: it imports the code beside it.
"""

from __future__ import annotations

import argparse
import gc
import subprocess
import sys
import tracemalloc

import _repo  # noqa: F401 - the checkout on sys.path
import orjson

from raykueue.controller import caches
from raykueue.controller.caches import slim_pod, slim_workload
from testkit import controller_objects as o

PER_SECOND = 10  # objects that share a creation (and condition) timestamp


def _stamp(i: int) -> str:
    s = i // PER_SECOND
    return f"2026-12-03T{10 + s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}Z"


def as_sent(n: int) -> list[tuple[bytes, bytes]]:
    """N (pod, Workload) pairs as JSON bytes, as the API server sends them."""
    out = []
    for i in range(n):
        pod = o.pod(gated=False, phase="Running", ready=True)
        pod["metadata"]["creationTimestamp"] = _stamp(i)
        for cond in pod["status"]["conditions"]:
            cond["lastTransitionTime"] = _stamp(i + 3)
        wl = o.workload(pod, "admitted", pods_ready="True")
        wl["metadata"]["creationTimestamp"] = _stamp(i)
        for cond in wl["status"]["conditions"]:
            cond["lastTransitionTime"] = _stamp(i + 2)
        out.append((orjson.dumps(pod), orjson.dumps(wl)))
    return out


def held_per_pod(n: int) -> float:
    sent = as_sent(n)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.take_snapshot()
    kept = [(slim_pod(orjson.loads(pod)), slim_workload(orjson.loads(wl))) for pod, wl in sent]
    gc.collect()
    held = tracemalloc.take_snapshot()
    tracemalloc.stop()
    assert len(kept) == n
    return sum(s.size_diff for s in held.compare_to(base, "filename")) / n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="5000,12000")
    parser.add_argument("--not-interned", help="comma-separated field names")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a size, in this process
    args = parser.parse_args()
    if args.one:
        if args.not_interned is not None:
            caches._NOT_INTERNED = frozenset(f for f in args.not_interned.split(",") if f)
        print(f"{held_per_pod(args.one):.0f}")
        return 0
    variant = [] if args.not_interned is None else ["--not-interned", args.not_interned]
    print("| pods and Workloads | bytes held per pod and its Workload |")
    print("|---|---|")
    for n in (int(s) for s in args.sizes.split(",")):
        held = subprocess.run([sys.executable, __file__, "--one", str(n), *variant], check=True,
                              capture_output=True, text=True).stdout.strip()
        print(f"| {n} | {held} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
