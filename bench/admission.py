"""Admission throughput and latency: raykueue's server against its ceiling.

Starts `raykueue serve --no-cluster` and bench/ceiling.py (the same decision
behind a bare ASGI handler) on core 0, drives each in turn with wrk on core 1
over TLS keep-alive connections with KubeRay head and worker creations, and
prints reviews/s, p50 and p99 for both, alternating rounds so that the noise
of a shared machine falls on both alike. Needs `wrk` (apt-get install wrk).

With --before DIR (a checkout of another commit, e.g. `git worktree add DIR
COMMIT`), that tree's `raykueue serve` takes a turn in each round too, so a
change is measured beside its base and the ceiling in one run.

The ceiling is run as `raykueue serve` runs (bench/ceiling.py --tune-interpreter:
the same GC freeze and switch interval), so that the ratio compares webhooks, not
interpreter settings; --untuned-ceiling adds the ceiling as it ran before (no
tuning) to every round, to show what that alone moves. --variant NAME=DIR adds
further trees' servers, as --before does. Latency percentiles (p50, p90, p99,
p99.9, max) are wrk's own, per round, from its done() hook.

    python bench/admission.py [--connections 32] [--seconds 10] [--rounds 3] [--before DIR]
        [--variant NAME=DIR ...] [--untuned-ceiling]
"""

from __future__ import annotations

import argparse
import json
import os
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

from bench.wrk import LUA, PERCENTILES, parse_wrk
from raykueue.core import contract as c
from testkit import reviews as rv


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
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "-s", str(script),
           f"https://127.0.0.1:{port}", "--", *map(str, paths)]
    if shutil.which("taskset") and os.cpu_count() and os.cpu_count() > 1:
        cmd = ["taskset", "-c", "1", *cmd]
    cpu_before = cpu_seconds(pid)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    cpu = cpu_seconds(pid) - cpu_before
    result = parse_wrk(out)
    result["cpu_us"] = cpu / result.pop("requests") * 1e6
    return result


def _row(result: dict) -> str:
    return (f"{result['rps']:9.0f} reviews/s  "
            + "  ".join(f"{k} {result[k]:6.2f}" for k in PERCENTILES)
            + f" ms  {result['cpu_us']:6.1f} us CPU/review")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", type=Path, metavar="DIR",
                        help="a source tree of another commit whose server also takes a turn")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=DIR",
                        help="one more source tree whose server takes a turn (repeatable)")
    parser.add_argument("--untuned-ceiling", action="store_true",
                        help="also run the ceiling without raykueue's interpreter tuning")
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
    for spec in args.variant:
        name, _, tree = spec.partition("=")
        trees[name] = Path(tree).resolve()
    ceilings = {"ceiling": ["--tune-interpreter"],
                **({"ceiling-untuned": []} if args.untuned_ceiling else {})}
    order = [*ceilings, *trees]
    ports = {name: free_port() for name in order}
    servers: dict[str, subprocess.Popen] = {}
    try:
        for name, tree in trees.items():
            servers[name] = subprocess.Popen(
                [*pin, sys.executable, "-m", "raykueue.app.cli", "serve", "--no-cluster",
                 "--host", "127.0.0.1", "--port", str(ports[name]), "--cert-dir", str(certs)],
                env={**env, "PYTHONPATH": str(tree)}, stderr=log, cwd=tree)
            answer = wait_ready(ports[name], certs / "ca.crt", paths[0].read_bytes())
            assert answer["response"]["allowed"] and answer["response"].get("patch"), answer
        for name, flags in ceilings.items():
            servers[name] = subprocess.Popen(
                [*pin, sys.executable, str(ROOT / "bench" / "ceiling.py"),
                 "--port", str(ports[name]), "--cert-dir", str(certs), *flags],
                env=env, stderr=log, cwd=ROOT)
            wait_ready(ports[name], certs / "ca.crt", paths[0].read_bytes())

        sizes = ", ".join(f"{p.stem} {p.stat().st_size} B" for p in paths)
        print(f"bodies: {sizes}; {args.connections} connections, {args.seconds}s x "
              f"{args.rounds} rounds each, servers on core 0, wrk on core 1; "
              f"latencies in ms; trees: " + ", ".join(f"{n} {t}" for n, t in trees.items()))
        width = max(map(len, order))
        results: dict[str, list[dict]] = {name: [] for name in order}
        for round_no in range(args.rounds):
            for name in order:
                result = run_wrk(servers[name].pid, ports[name], script, paths, args.connections,
                                 args.seconds)
                results[name].append(result)
                print(f"  round {round_no + 1} {name:{width}s} {_row(result)}", flush=True)
        keys = ("rps", *PERCENTILES, "cpu_us")
        for name in order:
            median = {k: statistics.median(r[k] for r in results[name]) for k in keys}
            print(f"median {name:{width}s} {_row(median)}")
        for name in order[1:]:
            pairs = list(zip(results[name], results["ceiling"], strict=True))
            for what, ratio in (
                    ("throughput", lambda r, cl: r["rps"] / cl["rps"]),
                    ("by CPU per review (noise-resistant)", lambda r, cl: cl["cpu_us"] / r["cpu_us"]),
                    ("p99 (ceiling = 1)", lambda r, cl: r["p99"] / cl["p99"]),
                    ("p99.9 (ceiling = 1)", lambda r, cl: r["p99.9"] / cl["p99.9"])):
                ratios = [ratio(r, cl) for r, cl in pairs]
                fmt = "{:.1%}" if "=" not in what else "{:.2f}"
                print(f"{name} / ceiling {what}: {fmt.format(statistics.median(ratios))} "
                      f"(per round: {', '.join(fmt.format(x) for x in ratios)})")
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
