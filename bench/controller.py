"""Controller figures on a real kube-apiserver: gate-lift latency and API writes per pod.

Starts (or reuses) the api-tier stack, creates N gated KubeRay-shaped pods,
runs the controller in-process and plays Kueue the way Kueue's own integration
tests do: one server-side apply of status.admission + QuotaReserved + Admitted
per Workload. It prints

- the time from each admission write to the gate-lifting patch being seen by a
  watch (p50, p99, max over N pods), and
- the writes of one whole pod lifecycle (Workload created, gate lifted,
  PodsReady, Finished on deletion) from the API server's own
  apiserver_request_total, with the bench's own writes subtracted, next to
  the controller's count of its requests, and
- with --memory, what the controller holds per pod once every gate is lifted:
  tracemalloc's live allocations since it started, by module and by source line.

    python bench/controller.py [--pods 1000] [--workers 4] [--memory]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _repo import ROOT  # the checkout, put on sys.path

import devstack
from bench.common import request_totals
from raykueue.controller.config import ControllerConfig
from raykueue.controller.loop import Controller
from raykueue.kube.cache import WatchCache
from raykueue.kube.client import load_api_client
from raykueue.kube.events import EventRecorder
from raykueue.kube.resources import PODS
from raykueue.kube.rest import Rest
from testkit import standins as t
from testkit.interrupt import interruptible
from testkit.reviews import gates
from testkit.waiting import wait_for


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--memory", action="store_true",
                        help="trace the controller's allocations (tracemalloc, slower)")
    args = parser.parse_args()
    n = args.pods

    # An api-tier stack of its own: no Kueue, scheduler or kwok writing to the
    # same pods and Workloads, so the API server's counts are ours and the bench's.
    config = devstack.StackConfig(stack_dir=Path(tempfile.mkdtemp(prefix="raykueue-bench-")))
    # Joined with our pid and released at the end: the stack is this run's (its own dir).
    stack, started = devstack.up("api", config, quiet=True, user_pid=os.getpid())
    api = load_api_client(str(stack.kubeconfig))
    assert api is not None
    admin = Rest(api)
    ns = f"bench-{int(time.time())}"
    admin.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                        "metadata": {"name": ns}})
    scope = {"flavor": f"bench-{ns}", "head": f"bench-head-{ns}",
             "worker": f"bench-worker-{ns}", "cq": f"bench-cq-{ns}"}
    admin.create(t.FLAVORS.path(), {"apiVersion": t.FLAVORS.api_version, "kind": "ResourceFlavor",
                                    "metadata": {"name": scope["flavor"]}})
    for role, value in (("head", 1000), ("worker", 100)):
        admin.create(t.WPCS.path(), {"apiVersion": t.WPCS.api_version,
                                     "kind": "WorkloadPriorityClass",
                                     "metadata": {"name": scope[role]}, "value": value})
    print(f"stack {'started' if started else 'reused'}; namespace {ns}; {n} pods; "
          f"{args.workers} controller workers")

    before = request_totals(admin)
    with ThreadPoolExecutor(8) as pool:
        pods = list(pool.map(lambda i: t.create_pod(admin, t.ray_pod(
            ns, scope, "worker", f"rc-bench-{i:04d}")), range(n)))

    memory = Memory(n) if args.memory else None
    stop = threading.Event()
    controller = Controller(admin, ControllerConfig(namespace=ns, head_first=False,
                                                    workers=args.workers),
                            EventRecorder(admin, "raykueue.io/controller"))
    thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    thread.start()
    lifted: dict[str, float] = {}
    # The bench's own watch keeps a pod's name and gates, so that what it holds does not
    # weigh in what --memory finds.
    watcher = WatchCache(admin, PODS, namespace=ns, transform=lambda pod: {
        "metadata": {"name": pod["metadata"]["name"]},
        "spec": {"schedulingGates": pod["spec"].get("schedulingGates")}})
    watcher.add_handler(lambda _e, pod: (not gates(pod)) and lifted.setdefault(
        pod["metadata"]["name"], time.monotonic()))
    watcher.start()
    try:
        t0 = time.monotonic()
        wait_for(lambda: len(t.workloads_in(admin, ns)) == n, timeout=120 + n / 2,
                   message=f"{n} Workloads")
        print(f"{n} Workloads created in {time.monotonic() - t0:.1f}s")
        watcher.wait_synced(30)

        admitted: dict[str, float] = {}
        for wl in t.workloads_in(admin, ns):
            admitted[wl["metadata"]["ownerReferences"][0]["name"]] = time.monotonic()
            t.kueue_status(admin, wl, scope)
        wait_for(lambda: len(lifted) == n, timeout=120 + n / 2,
                   message=lambda: f"{len(lifted)}/{n} gates lifted")
        latencies = sorted(lifted[name] - admitted[name] for name in admitted)
        p99 = latencies[min(n - 1, int(n * 0.99))]
        print(f"admitted -> gate lifted over {n} pods: p50 {statistics.median(latencies) * 1e3:.0f}"
              f" ms, p99 {p99 * 1e3:.0f} ms, max {latencies[-1] * 1e3:.0f} ms")
        if memory is not None:
            memory.report()

        for pod in pods:
            t.make_ready(admin, pod)
        wait_for(lambda: all(t.cond(wl, "PodsReady") for wl in t.workloads_in(admin, ns)),
                   timeout=120 + n / 2, message="PodsReady on every Workload")
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda p: admin.delete(PODS.path(ns, p["metadata"]["name"])), pods))
        wait_for(lambda: not t.workloads_in(admin, ns),
                   timeout=120 + n / 2, message="every Workload deleted")
    finally:
        watcher.stop()
        stop.set()
        thread.join(timeout=30)
    after = request_totals(admin)

    delta = {k: after[k] - before[k] for k in after if after[k] - before[k] > 0}
    # The bench's own writes (pods created, admissions, readiness, deletions)
    # and the garbage collector's (Workloads deleted with their pods).
    ours = {("POST", "pods", ""): n, ("APPLY", "workloads", "status"): n,
            ("APPLY", "pods", "status"): n, ("DELETE", "pods", ""): n,
            ("DELETE", "workloads", ""): delta.get(("DELETE", "workloads", ""), 0)}
    print("writes per pod lifecycle, from apiserver_request_total (bench's own subtracted):")
    total = 0.0
    for key in sorted(delta):
        verb, resource, sub = key
        if verb in ("GET", "LIST", "WATCH") or resource in ("leases", "namespaces"):
            continue
        count = delta[key] - ours.get(key, 0)
        if count <= 0:
            continue
        per_pod = count / n
        total += per_pod
        print(f"  {verb:6s} {resource}{'/' + sub if sub else '':14s} {per_pod:5.2f}")
    print(f"  total  {total:5.2f} per pod")
    counted = {k: v for k, v in _controller_writes().items() if v}
    print("controller's own count (raykueue_api_writes_total): "
          + ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(counted.items())))
    admin.delete(f"/api/v1/namespaces/{ns}")
    for path in (t.FLAVORS.path(None, scope["flavor"]), t.WPCS.path(None, scope["head"]),
                 t.WPCS.path(None, scope["worker"])):
        admin.delete(path)
    devstack.release(config, os.getpid())
    return 0


class Memory:
    """tracemalloc from before the controller starts to a point where it holds every
    pod and Workload: what is still allocated then is what it keeps per pod.

    Python objects only: the RSS a pod costs is bench/scaleup.py's figure, measured
    on a server process of its own. This process's RSS also holds the bench's own
    parses of whole lists and tracemalloc's traces."""

    TOP = 15
    FRAMES = 10  # deep enough to reach our own code from the stdlib (copy, json)

    def __init__(self, pods: int) -> None:
        self.pods = pods
        gc.collect()
        tracemalloc.start(self.FRAMES)
        self.base = tracemalloc.take_snapshot()

    def report(self) -> None:
        gc.collect()
        held = tracemalloc.take_snapshot()
        tracemalloc.stop()
        n = self.pods
        by_module: Counter[str] = Counter()
        by_line: Counter[str] = Counter()
        blocks: Counter[str] = Counter()
        for stat in held.compare_to(self.base, "traceback"):
            frames = list(reversed(stat.traceback))  # tracemalloc lists the oldest first
            top = _place(frames[0])
            ours = next((_place(f) for f in frames if _is_ours(f.filename)), None)
            line = top if ours is None or ours == top else f"{top} via {ours}"
            by_module[(ours or top).split(":")[0]] += stat.size_diff
            by_line[line] += stat.size_diff
            blocks[line] += stat.count_diff
        print(f"Python objects allocated since the controller started and alive with {n} pods "
              f"and their Workloads held: {sum(by_module.values()) / 1024 / n:.2f} KiB per pod")
        print("  by module (the first frame in this repository), KiB per pod:")
        for module, size in by_module.most_common(self.TOP):
            print(f"    {size / 1024 / n:6.2f}  {module}")
        print("  by source line, KiB per pod, blocks per pod:")
        for line, size in by_line.most_common(self.TOP):
            print(f"    {size / 1024 / n:6.2f}  {blocks[line] / n:5.1f}  {line}")


def _is_ours(path: str) -> bool:
    return path.startswith(str(ROOT) + "/") and "/.venv/" not in path


def _place(frame: tracemalloc.Frame) -> str:
    path = frame.filename
    for base in (str(ROOT) + "/", sys.prefix + "/lib/", sys.base_prefix + "/lib/"):
        if path.startswith(base):
            path = path[len(base):]
            break
    return f"{path}:{frame.lineno}"


def _controller_writes() -> dict[str, float]:
    from prometheus_client import REGISTRY

    writes: dict[str, float] = {}
    for metric in REGISTRY.collect():
        if metric.name != "raykueue_api_writes":
            continue
        for sample in metric.samples:
            if sample.name.endswith("_total"):
                key = " ".join(f"{v}" for v in sample.labels.values())
                writes[key] = writes.get(key, 0) + sample.value
    return writes


if __name__ == "__main__":
    interruptible()
    sys.exit(main())
