"""Scale-up of a real RayCluster through the real KubeRay operator, raykueue and Kueue.

For each size N: a fresh namespace (raykueue's webhooks serve it), a fresh
`raykueue serve` subprocess (webhooks + controller, the whole process measured),
a RayCluster opted in with `kueue.x-k8s.io/standalone: "true"` whose head is
Running before the clock starts; then its worker group is edited from 0 to N
replicas. Watches record when each worker pod was first seen gated and when its
Workload was first seen, and when the pod was first seen Running. Printed per N:
time until every worker is gated with its Workload, time until every admissible
worker is Running, the server's RSS at start and peak RSS (VmHWM from /proc), MiB per
pod ((peak - start) / N: what each pod and its Workload cost the caches and controller),
API writes per pod (apiserver_request_total) and how far it got when a bound ran out.

Node capacity and the ClusterQueue's quota are sized from the largest N, so every
worker is admissible; each phase is bounded by --max-wait or --per-pod-wait x N,
whichever is larger (KubeRay created 2-18 pods a second on a loaded machine, bench/RESULTS.md).

    python bench/scaleup.py [--sizes 100,1000,5000,10000] [--max-wait 900] [--per-pod-wait 0.6]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import _repo  # noqa: F401 - the checkout on sys.path

import devstack
from bench.common import (
    POD_RESOURCES,
    QUEUE,
    RAYCLUSTERS,
    WORKLOADS,
    add_namespace,
    bench_config,
    gates,
    label,
    lifecycle_writes,
    make_queue,
    percentile,
    proc_status_kib,
    request_totals,
    start_raykueue,
)
from raykueue.core import contract as c
from raykueue.kube.cache import WatchCache
from raykueue.kube.client import load_api_client
from raykueue.kube.resources import PODS
from raykueue.kube.rest import Rest
from testkit.interrupt import interruptible
from testkit.waiting import WaitTimeout, wait_for

CLUSTER = "scale"
KWOK_NODES = 10
# Kueue counts 200m / 256Mi per worker (KubeRay's wait-gcs-ready init container).
WORKER_CPU_MILLI, WORKER_MEMORY_MI = 200, 256


def raycluster(ns: str, max_workers: int) -> dict:
    container = {"image": "rayproject/ray:2.46.0", "resources": POD_RESOURCES}
    return {
        "apiVersion": RAYCLUSTERS.api_version, "kind": "RayCluster",
        "metadata": {"name": CLUSTER, "namespace": ns, "labels": {c.QUEUE_LABEL: QUEUE},
                     "annotations": {c.STANDALONE_ANNOTATION: "true"}},
        "spec": {
            "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {
                "containers": [{"name": "ray-head", **container}]}}},
            "workerGroupSpecs": [{
                "groupName": "cpu", "replicas": 0, "minReplicas": 0, "maxReplicas": max_workers,
                "rayStartParams": {},
                "template": {"spec": {"containers": [{"name": "ray-worker", **container}]}},
            }],
        },
    }


class Seen:
    """First-seen times per worker pod, fed by watch handlers (one thread each)."""

    def __init__(self) -> None:
        self.created: dict[str, float] = {}
        self.gated: dict[str, float] = {}
        self.workload: dict[str, float] = {}
        self.running: dict[str, float] = {}

    def on_pod(self, _event: str, pod: dict) -> None:
        if pod["metadata"].get("labels", {}).get(c.NODE_TYPE_LABEL) != c.ROLE_WORKER:
            return
        name, now = pod["metadata"]["name"], time.monotonic()
        self.created.setdefault(name, now)
        if c.GATE in gates(pod):
            self.gated.setdefault(name, now)
        if pod.get("status", {}).get("phase") == "Running":
            self.running.setdefault(name, now)

    def on_workload(self, _event: str, wl: dict) -> None:
        for owner in wl["metadata"].get("ownerReferences") or []:
            if owner.get("kind") == "Pod":
                self.workload.setdefault(owner["name"], time.monotonic())

    def gated_with_workload(self) -> dict[str, float]:
        """Per pod seen gated and with its Workload: when the later of the two was seen."""
        # Called from the progress thread while the watch threads add entries: copy
        # first (a dict copy is one step under the GIL; iterating one is not).
        gated, workload = dict(self.gated), dict(self.workload)
        return {n: max(t, workload[n]) for n, t in gated.items() if n in workload}

    def lags(self, done: dict[str, float]) -> list[float]:
        """Per pod: seconds from the pod first being seen to `done` (KubeRay's create rate aside)."""
        return sorted(done[n] - self.created[n] for n in done if n in self.created)


class RssSampler(threading.Thread):
    """Peak RSS of one process: VmHWM (kernel's own high-water mark) at the end."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.stop = threading.Event()
        self.start_rss = proc_status_kib(pid, "VmRSS")
        self.hwm = 0

    def run(self) -> None:
        while not self.stop.wait(1.0):
            self.hwm = max(self.hwm, proc_status_kib(self.pid, "VmHWM"))


class Progress(threading.Thread):
    """A line a minute, so that a run cut short (a bound, an interrupt) still says
    how far it got and what the server's memory was there."""

    def __init__(self, seen: Seen, rss: RssSampler, t0: float, every: float = 60.0) -> None:
        super().__init__(daemon=True)
        self.seen, self.rss, self.t0, self.every = seen, rss, t0, every
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.every):
            gated = len(self.seen.gated_with_workload())
            grown = (self.rss.hwm - self.rss.start_rss) / 1024
            per_pod = f", {grown / gated:.4f} MiB per pod" if gated else ""
            print(f"  {time.monotonic() - self.t0:.0f}s: {len(self.seen.created)} created, "
                  f"{gated} gated with Workload, {len(self.seen.running)} Running; RSS "
                  f"{proc_status_kib(self.rss.pid, 'VmRSS') / 1024:.0f} MiB, peak "
                  f"{self.rss.hwm / 1024:.0f} MiB{per_pod}", flush=True)


def one_size(stack: devstack.Stack, rest: Rest, n: int, max_wait: float) -> dict:
    ns = add_namespace(rest, f"scale-{n}", "raykueue", "bench")
    server = start_raykueue(stack, Path(tempfile.mkdtemp(prefix="raykueue-scale-")), ns)
    assert server.proc is not None
    rss = RssSampler(server.proc.pid)
    rss.start()
    seen = Seen()
    caches = [WatchCache(rest, PODS, namespace=ns), WatchCache(rest, WORKLOADS, namespace=ns)]
    caches[0].add_handler(seen.on_pod)
    caches[1].add_handler(seen.on_workload)
    result: dict = {"n": n, "ns": ns}
    progress: Progress | None = None
    try:
        rest.create(RAYCLUSTERS.path(ns), raycluster(ns, n))
        wait_for(lambda: any(p["status"].get("phase") == "Running"
                             for p in rest.get(PODS.path(ns))["items"]), timeout=180,
                 message="the Ray head to be admitted and Running")
        for cache in caches:
            cache.start()
            cache.wait_synced(60)
        before = request_totals(rest)
        t0 = time.monotonic()
        progress = Progress(seen, rss, t0)
        progress.start()
        rest.json_patch(RAYCLUSTERS.path(ns, CLUSTER),
                        [{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": n}])
        for phase, done in (("gated", lambda: len(seen.gated_with_workload()) >= n),
                            ("running", lambda: len(seen.running) >= n)):
            try:
                wait_for(done, timeout=max_wait, interval=1.0, message=phase)
            except WaitTimeout:
                result[f"{phase}_timeout"] = True
        for cache in caches:  # what was seen stops changing before it is read
            cache.stop()
        workload_done = seen.gated_with_workload()
        times = list(workload_done.values())
        result.update(
            created_s=max(seen.created.values()) - t0 if seen.created else None,
            workload_lag=seen.lags(workload_done), running_lag=seen.lags(seen.running),
            gated=len(times), running=len(seen.running),
            gated_s=max(times) - t0 if times else None,
            running_s=max(seen.running.values()) - t0 if seen.running else None,
            hwm_mib=max(rss.hwm, proc_status_kib(server.proc.pid, "VmHWM")) / 1024,
            start_rss_mib=rss.start_rss / 1024,
            bound_s=max_wait,
            writes=lifecycle_writes(before, request_totals(rest)),
        )
    finally:
        rss.stop.set()
        if progress is not None:
            progress.stop.set()
        for cache in caches:
            cache.stop()
        rest.delete(f"/api/v1/namespaces/{ns}")
        try:
            wait_for(lambda: not rest.get(PODS.path(ns))["items"], timeout=max_wait, interval=2,
                     message=f"the pods of {ns} to be deleted")
        except WaitTimeout as e:
            print(f"  cleanup: {e}")
        server.close()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,5000")
    parser.add_argument("--max-wait", type=float, default=900,
                        help="least bound on each phase, seconds")
    parser.add_argument("--per-pod-wait", type=float, default=0.6,
                        help="bound on each phase per worker, seconds (when larger than --max-wait)")
    parser.add_argument("--keep-stack", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    largest = max(sizes)
    # Room for the largest size plus the head and a tenth to spare, on nodes and in quota.
    room = largest + largest // 10 + 100
    config = bench_config(nodes=KWOK_NODES, pods_per_node=max(600, -(-room // KWOK_NODES)))
    # A user of the stack (our pid) until the release below: a stack of a test session
    # stays the session's; one this run starts goes with the release (kept with --keep-stack).
    stack, started = devstack.up("e2e", config, user_pid=os.getpid(), by_hand=args.keep_stack)
    api = load_api_client(str(stack.kubeconfig))
    assert api is not None
    rest = Rest(api)
    cpu, memory = max(2000, room * WORKER_CPU_MILLI // 1000), max(4000, room * WORKER_MEMORY_MI // 1024)
    make_queue(rest, "bench", cpu=str(cpu), memory=f"{memory}Gi")
    print(f"stack {'started' if started else 'reused'} at {stack.dir}; {config.nodes.count} kwok "
          f"nodes x {config.nodes.capacity['pods']} pods; ClusterQueue bench: cpu {cpu}, memory "
          f"{memory}Gi (KubeRay's wait-gcs-ready init container makes each worker "
          f"{WORKER_CPU_MILLI}m/{WORKER_MEMORY_MI}Mi)")
    results = []
    try:
        for n in sizes:
            print(f"\n-- {n} workers", flush=True)
            r = one_size(stack, rest, n, max(args.max_wait, args.per_pod_wait * n))
            results.append(r)
            print(f"  gated with Workload: {r['gated']}/{n} after {r['gated_s'] or 0:.1f}s"
                  f"{' (bound reached)' if r.get('gated_timeout') else ''}; Running: "
                  f"{r['running']}/{n} after {r['running_s'] or 0:.1f}s"
                  f"{' (bound reached)' if r.get('running_timeout') else ''}; peak RSS "
                  f"{r['hwm_mib']:.0f} MiB (at start {r['start_rss_mib']:.0f} MiB, "
                  f"{mib_per_pod(r):.4f} MiB per pod)", flush=True)
            for what in ("workload_lag", "running_lag"):
                lags = r[what]
                if lags:
                    print(f"  {what.replace('_', ' ')} after the pod appeared: "
                          f"p50 {percentile(lags, 0.5):.2f}s p99 {percentile(lags, 0.99):.2f}s "
                          f"max {lags[-1]:.2f}s")
            print(f"  KubeRay's last worker pod appeared {r['created_s'] or 0:.1f}s after the edit")
            for key, count in sorted(r["writes"].items()):
                if count / n >= 0.01:
                    print(f"    {label(key):32s} {count / n:6.2f} per worker")
    finally:
        devstack.release(config, os.getpid())
    print("\n| workers | last pod created (s) | gated + Workload (s) | per 1,000 pods (s) | all Running (s) "
          "| Workload lag p50/p99 (s) | RSS at start (MiB) | peak RSS (MiB) | MiB per pod "
          "| writes per worker |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        n = r["n"]
        gated = f"{r['gated_s']:.1f}" if r["gated"] >= n else f"{r['gated']}/{n} in {r['bound_s']:.0f}"
        running = (f"{r['running_s']:.1f}" if r["running"] >= n
                   else f"{r['running']}/{n} in {r['bound_s']:.0f}")
        rate = f"{r['gated_s'] / n * 1000:.1f}" if r["gated"] >= n else "-"
        lags = r["workload_lag"]
        lag = f"{percentile(lags, 0.5):.2f} / {percentile(lags, 0.99):.2f}" if lags else "-"
        print(f"| {n} | {r['created_s'] or 0:.1f} | {gated} | {rate} | {running} | {lag} | "
              f"{r['start_rss_mib']:.0f} | {r['hwm_mib']:.0f} | {mib_per_pod(r):.4f} | "
              f"{sum(r['writes'].values()) / n:.2f} |")
    return 0


def mib_per_pod(r: dict) -> float:
    """What each worker (its pod and its Workload) adds to the server's peak RSS."""
    return (r["hwm_mib"] - r["start_rss_mib"]) / r["n"]


if __name__ == "__main__":
    interruptible()
    sys.exit(main())
