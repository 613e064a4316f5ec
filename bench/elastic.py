"""raykueue or Kueue's elastic RayCluster: one workload, the real Ray autoscaler, side by side.

The Ray tier's machinery (devstack/ray/runner.py: a Ray head, autoscaler and worker
for each pod kwok runs; devstack/ray/driver.py; testkit/raycluster.py) on one e2e
stack with Kueue as shipped and raykueue (webhooks + controller) registered for the
whole cluster. The same RayCluster (head 750m + the autoscaler sidecar 250m: 1 CPU;
one worker group, 1 CPU a worker, minReplicas 1, maxReplicas 10, autoscaler v2) is
run each way, in turns that never overlap (the API server's counters are
cluster-wide):

  kueue-elastic   Kueue's RayCluster integration as an elastic job: queue label and
                  `kueue.x-k8s.io/elastic-job: "true"` (workload slices; feature gate
                  ElasticJobsViaWorkloadSlices, which the Kueue version must ship on or
                  the run says it was turned on); priority class `ray-head`
  kueue-partial   the same plus `kueue.x-k8s.io/elastic-job-scale-up-strategy: partial`,
                  only where the Kueue version has it
  raykueue        opted in (`kueue.x-k8s.io/standalone: "true"`): a Workload per pod
  raykueue-gang   opted in with `raykueue.io/gang: "true"`: head + minReplicas as one

Each way runs three scenarios, each in a namespace and ClusterQueue of its own
(cpu 4: the head and 3 workers):

  demand    5 one-CPU tasks: which workers join Ray and run tasks within --window
            seconds, and when; worker pods created per worker that ran (churn)
  idle      cluster `first` at 3 workers, `second` waiting for its head and one
            worker; `first`'s tasks end: when its quota is freed (idleTimeoutSeconds
            10), when `second` is admitted and whole in Ray; the API writes of the
            whole scenario (two clusters from creation to deletion) per pod
  preempt   preemption withinClusterQueue LowerPriority; the cluster at 3 busy
            workers; a Job of 1 CPU with WorkloadPriorityClass `bench-urgent`
            (10000, above every Ray class) arrives and is deleted --hold seconds after
            its admission: what was taken, tasks lost or restarted, and when the
            cluster is whole again (head and 3 workers in Ray, every task running;
            a driver lost with its head is started again and resubmits its tasks,
            as a user's retry would)

    python bench/elastic.py [--ways kueue-elastic,raykueue,raykueue-gang]
                            [--window 180] [--hold 15] [--keep-stack]

Prints one table (markdown) with every figure for every way.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _repo  # noqa: F401 - the checkout on sys.path

import devstack
from bench.common import (
    ADMIN,
    CQS,
    FLAVORS,
    LQS,
    RAYCLUSTERS,
    WORKLOADS,
    lifecycle_writes,
    request_totals,
)
from devstack.controlplane import pki
from devstack.kueue.shipped import feature_gate_default, kueue_module_dir, sources_mention
from devstack.ray import dashboard_proxy
from devstack.ray import driver as ray_driver
from devstack.ray.runner import RayClusterRunner, RayTier
from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.kube.client import load_api_client
from raykueue.kube.rest import ApiError, Rest
from testkit.interrupt import interruptible
from testkit.raycluster import (
    HEAD_TIMEOUT,
    SCALE_UP_ANNOTATION,
    WAYS,
    Observer,
    RayCluster,
    Seen,
    for_way,
    raycluster,
    reserved_cpu,
    workload_is_of,
)
from testkit.reads import get_or_none
from testkit.servers import RaykueueServer
from testkit.standins import WPCS
from testkit.waiting import wait_for

ELASTIC_GATE = "ElasticJobsViaWorkloadSlices"
LOCAL_QUEUE = "team-a"
URGENT_CLASS, URGENT_VALUE = "bench-urgent", 10000
QUOTA_CPU = 4  # the head (1 CPU with its autoscaler sidecar) and 3 workers of 1 CPU
MOST_WORKERS = QUOTA_CPU - 1
BASE_WORKERS = 1  # minReplicas
DEMAND = 5  # one-CPU tasks in the demand scenario: 2 workers beyond the quota
BUSY = MOST_WORKERS  # tasks that fill the quota in the idle and preempt scenarios
IDLE_SECONDS = 10
JOIN_TIMEOUT = 300  # tests/ray: a busy 2-core machine starts a Ray node in up to a minute
GONE_TIMEOUT = 180


# ---- the RayCluster each way ------------------------------------------------------------

def cluster_body(way: str, name: str, idle_seconds: int = 60) -> dict[str, Any]:
    """The Ray tier's RayCluster, `BASE_WORKERS` at least, queued `way` on LOCAL_QUEUE."""
    body = raycluster(name, idle_seconds=idle_seconds, min_workers=BASE_WORKERS)
    body["metadata"]["labels"][c.QUEUE_LABEL] = LOCAL_QUEUE
    # Kueue admits the cluster as one Workload: it gets the class raykueue gives heads.
    return for_way(body, way, whole_priority_class="ray-head")


# ---- the run's context --------------------------------------------------------------------

@dataclass
class Context:
    stack: devstack.Stack
    rest: Rest
    workdir: Path
    window: float
    hold: float
    ca: pki.Pair = field(init=False)
    routes: dashboard_proxy.Routes = field(init=False)

    def __post_init__(self) -> None:
        self.ca = pki.ensure_ca(self.stack.pki_dir)  # signs each autoscaler's client certificate
        self.routes = dashboard_proxy.Routes(dashboard_proxy.routes_dir(self.stack.dir))

    @contextmanager
    def tier(self, name: str) -> Iterator[RayTier]:
        """Every Ray process of one scenario; none may outlive it."""
        tier = RayTier(self.stack.log_dir / "ray" / f"elastic-{name}")
        tier.watch_sessions([self.stack.procs[n].pid for n in ("dashboard-proxy", "ray-operator")])
        failed = True
        try:
            yield tier
            failed = False
        finally:
            left = tier.close(keep_files=failed)
            if left:
                raise RuntimeError("Ray processes outlived the scenario:\n" + "\n".join(left))
            if tier.watched.off_loopback:
                raise RuntimeError(f"Ray sockets off loopback: {tier.watched.off_loopback}")

    @contextmanager
    def namespace(self, prefix: str, preemption: bool = False) -> Iterator[str]:
        """A namespace with its own ResourceFlavor, ClusterQueue (cpu QUOTA_CPU) and
        LocalQueue, all deleted after (the RayClusters first, and waited for)."""
        ns = f"{prefix}-{uuid.uuid4().hex[:6]}"
        cq = f"elastic-{ns}"
        rest = self.rest
        rest.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": ns}})
        rest.create(FLAVORS.path(), {"apiVersion": FLAVORS.api_version, "kind": "ResourceFlavor",
                                     "metadata": {"name": cq}, "spec": {"nodeLabels": {"type": "kwok"}}})
        spec: dict[str, Any] = {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
                "name": cq, "resources": [{"name": "cpu", "nominalQuota": str(QUOTA_CPU)},
                                          {"name": "memory", "nominalQuota": "100Gi"}]}]}]}
        if preemption:
            spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
        rest.create(CQS.path(), {"apiVersion": CQS.api_version, "kind": "ClusterQueue",
                                 "metadata": {"name": cq}, "spec": spec})
        rest.create(LQS.path(ns), {"apiVersion": LQS.api_version, "kind": "LocalQueue",
                                   "metadata": {"name": LOCAL_QUEUE}, "spec": {"clusterQueue": cq}})
        wait_for(lambda: get_or_none(rest, f"/api/v1/namespaces/{ns}/serviceaccounts/default"),
                 timeout=60, message=f"ServiceAccount {ns}/default")
        wait_for(lambda: condition(rest.get(CQS.path(None, cq)), "Active") == "True", timeout=60,
                 message=f"ClusterQueue {cq} Active")
        try:
            yield ns
        finally:
            self.delete_all(ns)
            for path in (f"/api/v1/namespaces/{ns}", LQS.path(ns, LOCAL_QUEUE), CQS.path(None, cq),
                         FLAVORS.path(None, cq)):
                with suppress(ApiError):
                    rest.delete(path)

    def delete_all(self, ns: str) -> None:
        """Every RayCluster and Job in `ns` deleted, and their pods and Workloads gone."""
        for path in (RAYCLUSTERS.path(ns), f"/apis/batch/v1/namespaces/{ns}/jobs"):
            with suppress(ApiError):
                self.rest.request("DELETE", path, query={"propagationPolicy": "Background"})
        def left() -> list[str]:
            return [p["metadata"]["name"] for p in pods(self.rest, ns)] + [
                x["metadata"]["name"] for x in self.rest.get(WORKLOADS.path(ns))["items"]]

        wait_for(lambda: not left(), timeout=GONE_TIMEOUT, interval=0.5,
                 message=lambda: f"pods and Workloads of {ns} gone: {left()}")

    def create(self, tier: RayTier, ns: str, body: dict[str, Any]) -> RayClusterRunner:
        """The RayCluster created, Ray run for its pods from now on."""
        self.rest.create(RAYCLUSTERS.path(ns), body)
        return RayClusterRunner(tier, self.stack.api, self.ca, ns, body["metadata"]["name"],
                                self.routes).start()

    def connect(self, tier: RayTier, runner: RayClusterRunner, attempt: int = 1) -> RayCluster:
        """Once the runner's head (and autoscaler) are up: a driver on it."""
        wait_for(lambda: tier.check() or runner.head_ready(), timeout=HEAD_TIMEOUT, interval=0.5,
                 message=lambda: f"the Ray head of {runner.namespace}/{runner.cluster} "
                                 f"(API: {runner.last_api_error})")
        driver = tier.spawn(f"{runner.cluster}-driver-{attempt}",
                            ray_driver.argv(runner.gcs_address, runner.head_temp_dir), pipes=True)
        cluster = RayCluster(runner.namespace, runner.cluster, runner, driver)
        cluster.ask({"op": "nodes"})  # connected
        return cluster


def condition(obj: dict[str, Any], kind: str) -> str | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return cond.get("status")
    return None


def pods(rest: Rest, ns: str, cluster: str | None = None) -> list[dict[str, Any]]:
    query = {"labelSelector": f"{c.CLUSTER_LABEL}={cluster}"} if cluster else None
    return rest.get(f"/api/v1/namespaces/{ns}/pods", query)["items"]


def running(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and not pod["metadata"].get(
        "deletionTimestamp")


def role(pod: dict[str, Any]) -> str:
    return pod["metadata"]["labels"].get(c.NODE_TYPE_LABEL, "")


def replicas(rest: Rest, ns: str, name: str) -> int:
    rc = rest.get(RAYCLUSTERS.path(ns, name))
    return rc["spec"]["workerGroupSpecs"][0].get("replicas", 0)


def joined(cluster: RayCluster) -> int:
    return len(cluster.joined_workers())


def wait_joined(cluster: RayCluster, n: int) -> None:
    wait_for(lambda: joined(cluster) >= n, timeout=JOIN_TIMEOUT, interval=0.5,
             message=lambda: f"{n} workers of {cluster.name} in Ray "
                             f"(have {sorted(cluster.joined_workers())})")


def stopped(obs: Observer) -> Seen:
    """What an Observer saw; a watch that broke (and so missed events) fails the scenario."""
    seen = obs.stop()
    if seen.errors:
        raise RuntimeError(f"the watch behind the churn count broke: {seen.errors}")
    return seen


def tasks_started(hold: Path) -> set[int]:
    return {index for index, _ in ray_driver.starts(hold)}


def watch_until(check: Callable[[], bool], deadline: float, interval: float = 0.5) -> bool:
    """Poll `check` until it holds or the scenario's window ends (a window is the
    measurement here: what happens within it is the figure); whether it held."""
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def workloads_of(rest: Rest, ns: str, cluster: str) -> list[dict[str, Any]]:
    return [x for x in rest.get(WORKLOADS.path(ns))["items"] if workload_is_of(x, cluster)]


class CpuHeld:
    """The cpu a cluster's Workloads hold over time, fed every Workload event of its
    namespace by the scenario's Observer (`Observer(..., on_workload=held.seen)`)."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.samples: list[tuple[float, int]] = []
        self._latest: dict[str, dict[str, Any]] = {}

    def seen(self, event: str, obj: dict[str, Any]) -> None:
        if not workload_is_of(obj, self.cluster):
            return
        uid = obj["metadata"]["uid"]
        if event == "DELETED":
            self._latest.pop(uid, None)
        else:
            self._latest[uid] = obj
        self.samples.append((time.monotonic(), sum(reserved_cpu(x) for x in self._latest.values())))

    def first_below(self, millicores: int, after: float) -> float | None:
        return next((t for t, v in self.samples if t >= after and v < millicores), None)

    def held_at(self, when: float) -> int:
        return next((v for t, v in reversed(self.samples) if t <= when), 0)


# ---- the scenarios ------------------------------------------------------------------------

Figures = dict[str, Any]


def demand(ctx: Context, way: str) -> Figures:
    with ctx.namespace("demand") as ns, ctx.tier(f"{way}-demand") as tier:
        hold = ctx.workdir / f"{way}-demand"
        held = CpuHeld("demand")
        obs = Observer(ctx.rest, ns, on_workload=held.seen).start()
        runner = ctx.create(tier, ns, cluster_body(way, "demand"))
        cluster = ctx.connect(tier, runner)
        wait_joined(cluster, BASE_WORKERS)
        t0 = time.monotonic()
        cluster.ask({"op": "submit", "count": DEMAND, "cpus": 1, "hold": str(hold)})
        wait_for(lambda: replicas(ctx.rest, ns, cluster.name) == DEMAND, timeout=60,
                 message="the autoscaler to ask for every task's worker")
        asked = time.monotonic() - t0
        reached: dict[int, float] = {}

        def most_joined() -> bool:
            n = joined(cluster)
            reached.setdefault(n, time.monotonic() - t0)
            return n >= MOST_WORKERS

        watch_until(most_joined, t0 + ctx.window)
        most = max(reached)
        held_cpu = held.held_at(time.monotonic())
        # Each worker that joined takes one of the waiting tasks; the window may end the
        # moment the last one joins, before Ray has placed a task on it.
        watch_until(lambda: len(tasks_started(hold)) >= most, time.monotonic() + 60)
        started = len(tasks_started(hold))
        hold.touch()
        done = cluster.ask({"op": "results", "timeout": 180})["results"]
        seen = stopped(obs)
        churn = seen.churn()
        return {
            "demand.asked_s": asked,
            "demand.joined": most,
            "demand.joined_s": reached[most] if most > BASE_WORKERS else None,
            "demand.tasks_started": started,
            "demand.held_cpu": held_cpu / 1000,
            "demand.tasks_done": len(done),
            "demand.worker_pods": churn["worker_pods_created"],
            "demand.workers_ran": churn["workers_ran"],
            "demand.pods_per_worker_ran": churn["pods_per_admitted_worker"],
            "demand.workloads": churn["workloads_created"],
        }


def idle(ctx: Context, way: str) -> Figures:
    with ctx.namespace("idle") as ns, ctx.tier(f"{way}-idle") as tier:
        rest = ctx.rest
        held = CpuHeld("first")
        hold = ctx.workdir / f"{way}-idle"
        before = request_totals(rest)
        obs = Observer(rest, ns, on_workload=held.seen).start()
        first = ctx.connect(tier, ctx.create(tier, ns, cluster_body(way, "first", IDLE_SECONDS)))
        wait_joined(first, BASE_WORKERS)
        first.ask({"op": "submit", "count": BUSY, "cpus": 1, "hold": str(hold)})
        wait_joined(first, BUSY)
        second_runner = ctx.create(tier, ns, cluster_body(way, "second"))

        def second_pending() -> bool:  # Kueue has looked at it and found no room
            return any(condition(x, "QuotaReserved") == "False"
                       for x in workloads_of(rest, ns, "second"))

        wait_for(second_pending, timeout=120, interval=0.5,
                 message=lambda: f"a pending Workload for `second`: "
                                 f"{[x['metadata']['name'] for x in workloads_of(rest, ns, 'second')]}")
        peak = held.held_at(time.monotonic())
        hold.touch()
        assert len(first.ask({"op": "results", "timeout": 180})["results"]) == BUSY
        t_idle = time.monotonic()
        wait_for(lambda: replicas(rest, ns, "first") == BASE_WORKERS, timeout=IDLE_SECONDS + 180,
                 interval=0.5, message="the autoscaler to scale `first` down to its minimum")
        scaled = time.monotonic() - t_idle

        def second_running() -> bool:
            ps = pods(rest, ns, "second")
            return sum(running(p) for p in ps) == 1 + BASE_WORKERS

        wait_for(second_running, timeout=180, interval=0.5,
                 message=lambda: "`second`'s head and worker running: " + ", ".join(
                     f"{p['metadata']['name']} {p['status'].get('phase')}" for p in pods(rest, ns, "second")))
        admitted = time.monotonic() - t_idle
        second = ctx.connect(tier, second_runner)
        wait_joined(second, BASE_WORKERS)
        whole = time.monotonic() - t_idle
        freed_at = held.first_below(peak, t_idle)
        ctx.delete_all(ns)
        seen = stopped(obs)
        writes = lifecycle_writes(before, request_totals(rest))
        # The bench's own: two RayCluster creates, their deletes (a DELETE collection).
        n_pods = len(seen.pod_names)
        return {
            "idle.scaled_s": scaled,
            "idle.freed_s": None if freed_at is None else freed_at - t_idle,
            "idle.admitted_s": admitted,
            "idle.whole_s": whole,
            "idle.pods": n_pods,
            "idle.writes_per_pod": sum(writes.values()) / n_pods,
            "idle.workloads_per_pod": len(seen.created["Workload"]) / n_pods,
            "idle.writes_top": ", ".join(f"{v} {k[0]} {k[1]}{'/' + k[2] if k[2] else ''}"
                                         for k, v in writes.most_common(6)),
        }


def urgent_job(ns: str) -> dict[str, Any]:
    res = {"cpu": "1", "memory": "1Gi"}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "urgent", "labels": {c.QUEUE_LABEL: LOCAL_QUEUE,
                                                      c.PRIORITY_CLASS_LABEL: URGENT_CLASS}},
            "spec": {"parallelism": 1, "completions": 1, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "job", "image": "busybox",
                                "resources": {"requests": res, "limits": res}}]}}}}


def preempt(ctx: Context, way: str) -> Figures:
    with ctx.namespace("preempt", preemption=True) as ns, ctx.tier(f"{way}-preempt") as tier:
        rest = ctx.rest
        hold = ctx.workdir / f"{way}-preempt"
        runner = ctx.create(tier, ns, cluster_body(way, "busy"))
        cluster = ctx.connect(tier, runner)
        wait_joined(cluster, BASE_WORKERS)
        cluster.ask({"op": "submit", "count": BUSY, "cpus": 1, "hold": str(hold), "first_index": 0})
        wait_for(lambda: joined(cluster) == BUSY and len(tasks_started(hold)) == BUSY,
                 timeout=JOIN_TIMEOUT, interval=0.5,
                 message=lambda: f"{BUSY} workers busy (joined {joined(cluster)}, "
                                 f"tasks started {sorted(tasks_started(hold))})")
        before = {p["metadata"]["uid"]: role(p) for p in pods(rest, ns, "busy") if running(p)}
        nodes_before = len(tier.nodes)
        heads_before = runner.heads_stopped
        t0 = time.monotonic()
        rest.create(f"/apis/batch/v1/namespaces/{ns}/jobs", urgent_job(ns))

        def job_admitted() -> bool:
            return any(w.is_admitted(x) for x in rest.get(WORKLOADS.path(ns))["items"]
                       if x["metadata"]["name"].startswith("job-urgent-"))

        wait_for(job_admitted, timeout=120, interval=0.2, message="the urgent Job admitted")
        t_admit = time.monotonic()
        job_deleted: float | None = None
        drivers = 1
        lost = 0

        def whole() -> bool:
            nonlocal cluster, job_deleted, drivers, lost
            if job_deleted is None and time.monotonic() - t_admit >= ctx.hold:
                rest.request("DELETE", f"/apis/batch/v1/namespaces/{ns}/jobs/urgent",
                             query={"propagationPolicy": "Background"})
                job_deleted = time.monotonic()
            if runner.heads_stopped > heads_before and cluster.driver.exited() is None and drivers == 1:
                # The head went, and with it the Ray cluster the driver ran in: every
                # task (all were running, held) is lost; a new driver resubmits them
                # once a head is back, as a user's retry of the job would.
                lost = BUSY
                cluster.driver.stop()
            if cluster.driver.exited() is not None:
                if not runner.head_ready():
                    return False
                drivers += 1
                cluster = ctx.connect(tier, runner, attempt=drivers)
                cluster.ask({"op": "submit", "count": BUSY, "cpus": 1, "hold": str(hold),
                             "first_index": 0})
            if job_deleted is None:
                return False
            workers = cluster.joined_workers()
            latest = dict(ray_driver.starts(hold))  # the last start of each task
            return len(workers) == BUSY and len(latest) == BUSY and set(latest.values()) <= workers

        wait_for(whole, timeout=ctx.hold + 2 * JOIN_TIMEOUT, interval=0.5,
                 message=lambda: f"`busy` whole again: joined {sorted(cluster.joined_workers())}, "
                                 f"starts {ray_driver.starts(hold)}")
        t_whole = time.monotonic()
        # A pod that went never comes back under its uid: what is missing now was taken.
        alive = {p["metadata"]["uid"] for p in pods(rest, ns, "busy")}
        taken = {uid: r for uid, r in before.items() if uid not in alive}
        starts = ray_driver.starts(hold)
        hold.touch()
        assert len(cluster.ask({"op": "results", "timeout": 180})["results"]) == BUSY
        return {
            "preempt.admitted_s": t_admit - t0,
            "preempt.head_taken": sum(r == c.ROLE_HEAD for r in taken.values()),
            "preempt.workers_taken": sum(r == c.ROLE_WORKER for r in taken.values()),
            "preempt.tasks_lost": lost,
            "preempt.tasks_restarted": len(starts) - BUSY,
            "preempt.whole_s": t_whole - t0,
            "preempt.whole_after_job_s": t_whole - (job_deleted or t_whole),
            "preempt.nodes_started": len(tier.nodes) - nodes_before,
        }


# ---- the run -------------------------------------------------------------------------------

SCENARIOS: tuple[Callable[[Context, str], Figures], ...] = (demand, idle, preempt)

# (key, what the row says, format); None prints as "-".
ROWS: tuple[tuple[str, str, str], ...] = (
    ("demand.joined", f"demand ({DEMAND} one-CPU tasks, quota: head + {MOST_WORKERS} workers): "
                      "workers in Ray within the window", "{:d}"),
    ("demand.joined_s", "  tasks submitted -> the last of them joined Ray (s; -: none beyond the "
                        "minimum joined)", "{:.1f}"),
    ("demand.tasks_started", f"  tasks running on them (of {DEMAND})", "{:d}"),
    ("demand.held_cpu", f"  quota the cluster held then (CPU, of {QUOTA_CPU})", "{:.2f}"),
    ("demand.tasks_done", f"  tasks done once released (of {DEMAND})", "{:d}"),
    ("demand.worker_pods", "  worker pods created", "{:d}"),
    ("demand.pods_per_worker_ran", "  worker pods created per worker that ran (churn)", "{:.2f}"),
    ("demand.workloads", "  Workloads created", "{:d}"),
    ("idle.scaled_s", f"idle (idleTimeoutSeconds {IDLE_SECONDS}): tasks done -> `first` scaled "
                      "down (s)", "{:.1f}"),
    ("idle.freed_s", "  tasks done -> `first`'s Workloads hold less quota (s)", "{:.1f}"),
    ("idle.admitted_s", "  tasks done -> waiting `second` running, head and worker (s)", "{:.1f}"),
    ("idle.whole_s", "  tasks done -> `second` whole in Ray (s)", "{:.1f}"),
    ("idle.writes_per_pod", "  API writes per pod, both clusters created to gone", "{:.1f}"),
    ("idle.workloads_per_pod", "  Workloads created per pod", "{:.2f}"),
    ("preempt.head_taken", "preempt (urgent Job, 1 CPU): heads taken", "{:d}"),
    ("preempt.workers_taken", f"  workers taken (of {BUSY})", "{:d}"),
    ("preempt.tasks_lost", f"  Ray tasks lost with their driver (of {BUSY})", "{:d}"),
    ("preempt.tasks_restarted", "  Ray task starts beyond the first (retries, resubmissions)", "{:d}"),
    ("preempt.admitted_s", "  Job created -> admitted (s)", "{:.1f}"),
    ("preempt.whole_s", "  Job created -> Ray cluster whole again (s)", "{:.1f}"),
    ("preempt.whole_after_job_s", "  Job deleted -> whole again (s)", "{:.1f}"),
    ("preempt.nodes_started", "  Ray nodes started after the Job arrived", "{:d}"),
)


def cell(figures: Figures, key: str, fmt: str) -> str:
    if "error" in figures and key.split(".")[0] in figures["error"]:
        return "error"
    value = figures.get(key)
    if value is None:
        return "-"
    return fmt.format(value)


def table(results: dict[str, Figures], skipped: dict[str, str]) -> list[str]:
    ways = [*results, *skipped]
    lines = ["| figure | " + " | ".join(ways) + " |", "|---|" + "---|" * len(ways)]
    for key, what, fmt in ROWS:
        cells = [cell(results[wy], key, fmt) for wy in results] + ["n/a"] * len(skipped)
        lines.append(f"| {what} | " + " | ".join(cells) + " |")
    return lines


def run_way(ctx: Context, way: str) -> Figures:
    figures: Figures = {"error": {}}
    for scenario in SCENARIOS:
        name = scenario.__name__
        t = time.monotonic()
        try:
            figures.update(scenario(ctx, way))
            print(f"  {way} {name}: done in {time.monotonic() - t:.0f}s", flush=True)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as e:  # a way that fails one scenario still gets the others measured
            figures["error"][name] = f"{type(e).__name__}: {e}"
            print(f"  {way} {name}: FAILED after {time.monotonic() - t:.0f}s\n"
                  f"{traceback.format_exc()}", flush=True)
    return figures


def ensure_urgent_class(rest: Rest) -> None:
    with suppress(ApiError):
        rest.create(WPCS.path(), {"apiVersion": WPCS.api_version, "kind": "WorkloadPriorityClass",
                                  "metadata": {"name": URGENT_CLASS}, "value": URGENT_VALUE,
                                  "description": "bench/elastic.py: above every Ray class"})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ways", default=",".join(WAYS),
                        help=f"comma-separated, in this order of turns (default {','.join(WAYS)})")
    parser.add_argument("--window", type=float, default=180.0,
                        help="seconds after the tasks are submitted in which workers may join")
    parser.add_argument("--hold", type=float, default=15.0,
                        help="seconds the urgent Job holds its quota after its admission")
    parser.add_argument("--keep-stack", action="store_true", help="leave a stack this run started")
    args = parser.parse_args()
    ways = [x for x in args.ways.split(",") if x]
    unknown = set(ways) - set(WAYS)
    if unknown:
        parser.error(f"unknown ways {sorted(unknown)}; known: {', '.join(WAYS)}")

    config = devstack.StackConfig()
    if config.kueue_mode != "shipped":
        parser.error("Kueue's elastic RayCluster needs Kueue as shipped (RAYKUEUE_KUEUE=shipped)")
    version = config.kueue_version
    skipped: dict[str, str] = {}
    module = kueue_module_dir(version)
    if "kueue-partial" in ways and not sources_mention(module, SCALE_UP_ANNOTATION):
        skipped["kueue-partial"] = f"Kueue {version} has no {SCALE_UP_ANNOTATION}"
        ways.remove("kueue-partial")
    gate_on = feature_gate_default(module, ELASTIC_GATE)
    if not gate_on:
        # Only this run's stack: Kueue as shipped otherwise.
        config.kueue_config = {"featureGates": {ELASTIC_GATE: True}}
    # A user of the stack (our pid) until the release below: a stack of a test session
    # stays the session's; one this run starts goes with the release (kept with --keep-stack).
    stack, started = devstack.up("e2e", config, user_pid=os.getpid(), by_hand=args.keep_stack)
    api = load_api_client(str(stack.kubeconfig))
    assert api is not None
    rest = Rest(api)
    ensure_urgent_class(rest)
    workdir = Path(tempfile.mkdtemp(prefix="raykueue-elastic-"))
    server = RaykueueServer(stack, workdir / "raykueue",
                            args=["--controller-identity", ADMIN,
                                  "--controller-identity", c.DEFAULT_CONTROLLER_IDENTITY],
                            env={"RAYKUEUE_LEADER_ELECTION": "false"}, ready_timeout=180)
    (workdir / "raykueue").mkdir()
    versions = config.versions
    print(f"stack {'started' if started else 'reused'} at {stack.dir}: Kueue {version} as shipped "
          f"({ELASTIC_GATE} {'on as shipped' if gate_on else 'OFF as shipped, turned on for this run'}), "
          f"KubeRay {versions.get('KUBERAY_VERSION')}, Kubernetes {versions.get('KUBERNETES_VERSION')}; "
          f"ways in turn: {', '.join(ways)}; window {args.window:.0f}s, hold {args.hold:.0f}s",
          flush=True)
    results: dict[str, Figures] = {}
    t_run = time.monotonic()
    try:
        server.start()
        ctx = Context(stack, rest, workdir, args.window, args.hold)
        for way in ways:
            print(f"turn {way}", flush=True)
            results[way] = run_way(ctx, way)
    finally:
        server.close()
        devstack.release(config, os.getpid())
    print(f"\nOne run, {time.monotonic() - t_run:.0f}s, ways in turn, each scenario in its own "
          f"namespace and ClusterQueue:")
    for line in table(results, skipped):
        print(line)
    for way, why in skipped.items():
        print(f"{way}: not run: {why}")
    for way, figures in results.items():
        for scenario, error in figures["error"].items():
            print(f"{way} {scenario} failed: {error}")
        if "idle.writes_top" in figures:
            print(f"{way} idle writes, largest: {figures['idle.writes_top']}")
    return 1 if any(f["error"] for f in results.values()) else 0


if __name__ == "__main__":
    interruptible()
    sys.exit(main())
