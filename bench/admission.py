"""Admission throughput and latency: raykueue's server against its ceiling.

Starts `raykueue serve --no-cluster` and bench/ceiling.py (the same decision
behind a bare ASGI handler) on core 0, drives each in turn with wrk on core 1
over TLS keep-alive connections with KubeRay head and worker creations, and
prints reviews/s, p50 and p99 for both, alternating rounds so that the noise
of a shared machine falls on both alike. Needs `wrk` (apt-get install wrk).

With --before DIR (a checkout of another commit, e.g. `git worktree add DIR
COMMIT`), that tree's `raykueue serve` takes a turn in each round too, so a
change is measured beside its base and the ceiling in one run.

    python bench/admission.py [--connections 32] [--seconds 10] [--rounds 3] [--before DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from _repo import ROOT  # the checkout, put on sys.path

from raykueue.core import contract as c
from testkit import reviews as rv

LUA = """
local bodies = {}
local i = 0
init = function(args)
  for _, path in ipairs(args) do
    local f = assert(io.open(path, "rb")); table.insert(bodies, f:read("*all")); f:close()
  end
end
request = function()
  i = i % #bodies + 1
  return wrk.format("POST", "/mutate-pods", {["Content-Type"] = "application/json"}, bodies[i])
end
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bodies(workdir: Path) -> list[Path]:
    paths = []
    for name, review in (("head", rv.head_review()), ("worker", rv.worker_review())):
        # As KubeRay makes a pod of an opted-in RayCluster: its template's stamp.
        review = rv.set_label(review, c.OPTED_IN_LABEL, c.OPTED_IN_VALUE)
        review = rv.set_label(review, c.QUEUE_LABEL, "team-a")
        path = workdir / f"{name}.json"
        path.write_bytes(json.dumps(review).encode())
        paths.append(path)
    return paths


def wait_ready(port: int, ca: Path, body: bytes, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        try:
            # The server writes its CA on start; until then there is nothing to trust.
            context = ssl.create_default_context(cafile=str(ca))
            request = urllib.request.Request(
                f"https://127.0.0.1:{port}/mutate-pods", data=body,
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, context=context, timeout=2) as response:
                return json.loads(response.read())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process: unlike wall-clock throughput, it does
    not move when another tenant of the machine steals the server's core."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_wrk(pid: int, port: int, script: Path, paths: list[Path], connections: int,
            seconds: int) -> dict:
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(script),
           f"https://127.0.0.1:{port}", "--", *map(str, paths)]
    if shutil.which("taskset") and os.cpu_count() and os.cpu_count() > 1:
        cmd = ["taskset", "-c", "1", *cmd]
    cpu_before = cpu_seconds(pid)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    cpu = cpu_seconds(pid) - cpu_before
    if "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError(f"wrk saw errors:\n{out}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    return {"rps": rps, "p50": _latency(out, "50%"), "p99": _latency(out, "99%"),
            "cpu_us": cpu / total * 1e6}


def _latency(out: str, label: str) -> float:
    match = re.search(rf"^\s+{re.escape(label)}\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
    value, unit = float(match.group(1)), match.group(2)
    return value * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", type=Path, metavar="DIR",
                        help="a source tree of another commit whose server also takes a turn")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        print("bench needs wrk: apt-get install wrk", file=sys.stderr)
        return 2

    workdir = Path(tempfile.mkdtemp(prefix="raykueue-bench-"))
    certs = workdir / "certs"
    paths = bodies(workdir)
    script = workdir / "bodies.lua"
    script.write_text(LUA)
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") and (os.cpu_count() or 1) > 1 else []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = open(workdir / "server.log", "wb")  # noqa: SIM115 - lives as long as the servers
    trees = {"raykueue": ROOT, **({"before": args.before.resolve()} if args.before else {})}
    ports = {name: free_port() for name in ("ceiling", *trees)}
    servers: dict[str, subprocess.Popen] = {}
    try:
        for name, tree in trees.items():
            servers[name] = subprocess.Popen(
                [*pin, sys.executable, "-m", "raykueue.app.cli", "serve", "--no-cluster",
                 "--host", "127.0.0.1", "--port", str(ports[name]), "--cert-dir", str(certs)],
                env={**env, "PYTHONPATH": str(tree)}, stderr=log, cwd=tree)
            answer = wait_ready(ports[name], certs / "ca.crt", paths[0].read_bytes())
            assert answer["response"]["allowed"] and answer["response"].get("patch"), answer
        servers["ceiling"] = subprocess.Popen(
            [*pin, sys.executable, str(ROOT / "bench" / "ceiling.py"), "--port", str(ports["ceiling"]),
             "--cert-dir", str(certs)], env=env, stderr=log, cwd=ROOT)
        wait_ready(ports["ceiling"], certs / "ca.crt", paths[0].read_bytes())

        sizes = ", ".join(f"{p.stem} {p.stat().st_size} B" for p in paths)
        print(f"bodies: {sizes}; {args.connections} connections, {args.seconds}s x "
              f"{args.rounds} rounds each, servers on core 0, wrk on core 1")
        results: dict[str, list[dict]] = {name: [] for name in servers}
        for round_no in range(args.rounds):
            for name in ("ceiling", *trees):
                result = run_wrk(servers[name].pid, ports[name], script, paths, args.connections,
                                 args.seconds)
                results[name].append(result)
                print(f"  round {round_no + 1} {name:8s} {result['rps']:9.0f} reviews/s  "
                      f"p50 {result['p50']:6.2f} ms  p99 {result['p99']:6.2f} ms  "
                      f"{result['cpu_us']:6.1f} us CPU/review", flush=True)
        keys = ("rps", "p50", "p99", "cpu_us")
        summary = {name: {k: statistics.median(r[k] for r in runs) for k in keys}
                   for name, runs in results.items()}
        for name, s in summary.items():
            print(f"median {name:8s} {s['rps']:9.0f} reviews/s  p50 {s['p50']:6.2f} ms  "
                  f"p99 {s['p99']:6.2f} ms  {s['cpu_us']:6.1f} us CPU/review")
        for name in trees:
            label = "raykueue" if name == "raykueue" else f"before ({args.before})"
            pairs = list(zip(results[name], results["ceiling"], strict=True))
            ratios = [r["rps"] / cl["rps"] for r, cl in pairs]
            cpu_ratios = [cl["cpu_us"] / r["cpu_us"] for r, cl in pairs]
            print(f"{label} / ceiling throughput: {statistics.median(ratios):.1%} "
                  f"(per round: {', '.join(f'{x:.1%}' for x in ratios)})")
            print(f"{label} / ceiling by CPU per review (noise-resistant): "
                  f"{statistics.median(cpu_ratios):.1%} "
                  f"(per round: {', '.join(f'{x:.1%}' for x in cpu_ratios)})")
    finally:
        for server in servers.values():
            server.terminate()
        for server in servers.values():
            server.wait(timeout=10)
        log.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
