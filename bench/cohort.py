"""Many RayClusters in one cohort, each way in turn: raykueue (a Workload per pod) and
Kueue's elastic RayCluster (a Workload per cluster), on one e2e stack (kwok nodes, the
real KubeRay operator, Kueue as shipped with its metrics served).

Per way: --queues ClusterQueues in one cohort (each its namespace and LocalQueue,
preemption withinClusterQueue LowerPriority, reclaimWithinCohort Any), nominal cpu
quota for --quota-fraction of every pod; --clusters RayClusters of a head and
--workers workers (1 CPU each, so that a pod is one unit of quota either way) spread
over the queues. Three phases:

  fill     every cluster created; done when the quota is full (raykueue: quota-many
           pods Running; elastic: whole clusters Running) and every pod asked for is
           queued in Kueue (raykueue: every pod created, gated, with its Workload;
           elastic: a Workload for every cluster) - the rest is pending. On the way,
           the figures are taken each time the pending pods cross a --checkpoints
           value (the growth curve; bench/curve.py says what counts as pending)
  free     a tenth of the admitted clusters deleted: seconds from the delete to each
           pod that runs next (p50/p99), until as many pods run again as were freed
  storm    a RayCluster of --storm-workers workers at WorkloadPriorityClass
           bench-urgent (10000) in the first queue: seconds until all its pods run,
           pods of other clusters deleted meanwhile

Measured per way (Kueue is restarted before each, so its CPU and peak RSS are the
way's own): Kueue's admission attempts, attempt duration (its scheduling cycle) and
admission wait from Kueue's /metrics; CPU seconds and peak RSS of Kueue and of
raykueue from /proc; API server requests by verb and resource (apiserver_request_total,
diffed); apiserver_storage_objects and etcd's database size; each also per 1,000
pending pods (pods not running when the fill ends). Who sent the requests: Kueue's and
the KubeRay operator's own client-go counters (rest_client_requests_total, by method)
and raykueue's controller's write counter, beside the API server's total.

--kuberay-concurrency 1,8 runs every way once per value, the KubeRay operator
restarted with that --reconcile-concurrency first (and restarted as devstack starts
it, without the flag, after the run). Why, for the bench only: KubeRay v1.6.0
reconciles one RayCluster at a time by default and creates a cluster's pods one after
another inside that reconcile, each create through the pod webhooks (raykueue's and
Kueue's). Under raykueue KubeRay creates every pod, pending ones too, so the fill is
bound by one worker's serial creates times the webhooks' latency; raising the
concurrency separates the two: if pods/s grows with it, the single worker was the
bound; if not, the webhooks (or the API server) are. The stack keeps KubeRay's
default otherwise, as users run it.

    python bench/cohort.py [--clusters 100] [--workers 50] [--quota-fraction 0.33]
                           [--queues 4] [--storm-workers 200] [--ways kueue-elastic,raykueue]
                           [--max-wait 900] [--checkpoints 1000,5000,10000]
                           [--kuberay-concurrency 1,8] [--settle 60] [--node-capacity N] [--keep-stack]

Prints a markdown table with the ways side by side, then the growth curve's table (a row
per checkpoint and way); exits nonzero if a way failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

import _repo  # noqa: F401 - the checkout on sys.path
import yaml

import devstack
from bench import curve, scrape
from bench.common import (
    ADMIN,
    CQS,
    FLAVORS,
    LQS,
    RAYCLUSTERS,
    WORKLOADS,
    events_by_source,
    percentile,
)
from devstack.components import COMPONENTS, kueue_dir
from devstack.stack import restart_component
from raykueue.core import contract as c
from raykueue.kube.cache import WatchCache
from raykueue.kube.client import load_api_client
from raykueue.kube.resources import PODS
from raykueue.kube.rest import ApiError, Rest
from testkit.interrupt import interruptible
from testkit.raycluster import ELASTIC_ANNOTATION
from testkit.reads import gone
from testkit.servers import RaykueueServer, metrics_page
from testkit.standins import WPCS
from testkit.waiting import WaitTimeout, wait_for

WAYS = ("kueue-elastic", "raykueue")
RUN = uuid.uuid4().hex[:4]  # in every name, so a run never meets an earlier run's namespaces
WEBHOOK = "apiserver_admission_webhook_admission_duration_seconds"  # as the API server measures it
FLAVOR = "cohort"
LOCAL_QUEUE = "cohort"
URGENT_CLASS, URGENT_VALUE = "bench-urgent", 10000
STORM = "storm"
KWOK_NODES = 10
# One CPU a pod: above KubeRay's wait-gcs-ready init container (200m/256Mi), so a pod
# counts as exactly one unit of quota both ways.
POD_RESOURCES = {"requests": {"cpu": "1", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}
KUEUE_PREFIXES = ("kueue_admission_attempts_total", "kueue_admission_attempt_duration_seconds",
                  "kueue_admission_wait_time_seconds", "kueue_preempted_workloads_total",
                  "kueue_pending_workloads", "kueue_admitted_workloads_total",
                  "workqueue_adds_total")
OPERATOR_PREFIXES = ("rest_client_requests_total", "controller_runtime_reconcile_total")
RAYKUEUE_PREFIXES = ("raykueue_api_writes",)
CONCURRENCY_FLAG = "--reconcile-concurrency"
KEYS = "etcd_debugging_mvcc_keys_total"
SIZES = "apiserver_response_sizes"  # bytes the API server returned, by verb and resource


# ---- the objects ----------------------------------------------------------------------

def cluster_body(way: str, ns: str, name: str, workers: int, priority_class: str | None = None) -> dict:
    container = {"image": "rayproject/ray:2.46.0", "resources": POD_RESOURCES}
    pod_labels = {c.PRIORITY_CLASS_LABEL: priority_class} if priority_class and way == "raykueue" else {}
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": {c.QUEUE_LABEL: LOCAL_QUEUE},
                            "annotations": {}}
    if way == "raykueue":
        meta["annotations"][c.STANDALONE_ANNOTATION] = "true"
    else:
        meta["annotations"][ELASTIC_ANNOTATION] = "true"
        # raykueue's heads get ray-head; the whole cluster gets the same here.
        meta["labels"][c.PRIORITY_CLASS_LABEL] = priority_class or "ray-head"
    return {
        "apiVersion": RAYCLUSTERS.api_version, "kind": "RayCluster", "metadata": meta,
        "spec": {
            "headGroupSpec": {"rayStartParams": {}, "template": {
                "metadata": {"labels": dict(pod_labels)},
                "spec": {"containers": [{"name": "ray-head", **container}]}}},
            "workerGroupSpecs": [{
                "groupName": "cpu", "replicas": workers, "minReplicas": workers, "maxReplicas": workers,
                "rayStartParams": {},
                "template": {"metadata": {"labels": dict(pod_labels)},
                             "spec": {"containers": [{"name": "ray-worker", **container}]}},
            }],
        },
    }


def create_queues(rest: Rest, way: str, queues: int, cpu_each: int) -> list[str]:
    """`queues` namespaces, each with a ClusterQueue (cohort `cohort-<way>`) and LocalQueue."""
    with suppress(ApiError):
        rest.create(FLAVORS.path(), {"apiVersion": FLAVORS.api_version, "kind": "ResourceFlavor",
                                     "metadata": {"name": FLAVOR}})
    with suppress(ApiError):
        rest.create(WPCS.path(), {"apiVersion": WPCS.api_version, "kind": "WorkloadPriorityClass",
                                  "metadata": {"name": URGENT_CLASS}, "value": URGENT_VALUE,
                                  "description": "bench/cohort.py: the preemption storm"})
    namespaces = []
    for i in range(queues):
        ns = cq = f"cohort-{RUN}-{way}-{i}"
        rest.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        rest.create(CQS.path(), {"apiVersion": CQS.api_version, "kind": "ClusterQueue",
                                 "metadata": {"name": cq}, "spec": {
            "cohortName": f"cohort-{RUN}-{way}",
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            # The storm may preempt in other queues while it borrows: up to ray-head's
            # priority, so whole elastic clusters and raykueue's heads are fair game.
            "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any",
                           "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 1000}},
            "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
                "name": FLAVOR, "resources": [{"name": "cpu", "nominalQuota": str(cpu_each)},
                                              {"name": "memory", "nominalQuota": f"{cpu_each}Gi"}]}]}]}})
        rest.create(LQS.path(ns), {"apiVersion": LQS.api_version, "kind": "LocalQueue",
                                   "metadata": {"name": LOCAL_QUEUE}, "spec": {"clusterQueue": cq}})
        namespaces.append(ns)
    for ns in namespaces:
        wait_for(lambda ns=ns: any(x["type"] == "Active" and x["status"] == "True" for x in
                                   (rest.get(CQS.path(None, ns)).get("status") or {}).get("conditions", [])),
                 timeout=120, message=f"ClusterQueue {ns} Active")
    return namespaces


def delete_queues(rest: Rest, namespaces: list[str], timeout: float) -> None:
    for ns in namespaces:
        with suppress(ApiError):
            rest.request("DELETE", RAYCLUSTERS.path(ns), query={"propagationPolicy": "Background"})
    for ns in namespaces:
        with suppress(ApiError):
            rest.delete(f"/api/v1/namespaces/{ns}")
    try:
        wait_for(lambda: all(gone(rest, f"/api/v1/namespaces/{ns}") for ns in namespaces),
                 timeout=timeout, interval=2, message="the bench namespaces to be gone")
    except WaitTimeout as e:
        print(f"  cleanup: {e}", flush=True)
    for ns in namespaces:
        with suppress(ApiError):
            rest.delete(CQS.path(None, ns))


def count(rest: Rest, path: str) -> int:
    """Objects at `path`, from one item and the server's remainingItemCount (no full LIST)."""
    page = rest.get(path, {"limit": 1})
    return len(page["items"]) + int(page["metadata"].get("remainingItemCount") or 0)


# ---- what the pod watch saw ------------------------------------------------------------

class Pods:
    """First-seen Running and deleted times per pod uid, fed by one cluster-wide watch."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.lock = threading.Lock()
        self.cluster: dict[str, tuple[str, str]] = {}  # uid -> (namespace, cluster)
        self.role: dict[str, str] = {}
        self.seen: dict[str, float] = {}  # uid -> first seen (created)
        self.running: dict[str, float] = {}
        self.deleted: dict[str, float] = {}

    def on_pod(self, event: str, pod: dict) -> None:
        meta = pod["metadata"]
        if not meta["namespace"].startswith(self.prefix):
            return
        uid, now = meta["uid"], time.monotonic()
        with self.lock:
            labels = meta.get("labels", {})
            self.cluster.setdefault(uid, (meta["namespace"], labels.get(c.CLUSTER_LABEL, "")))
            self.role.setdefault(uid, labels.get(c.NODE_TYPE_LABEL, ""))
            self.seen.setdefault(uid, now)
            if event == "DELETED" or meta.get("deletionTimestamp"):
                self.deleted.setdefault(uid, now)
            elif (pod.get("status") or {}).get("phase") == "Running":
                self.running.setdefault(uid, now)

    def created(self) -> int:
        with self.lock:
            return len(self.cluster) - len(self.deleted)

    def running_now(self) -> dict[str, float]:
        with self.lock:
            return {u: t for u, t in self.running.items() if u not in self.deleted}

    def heads(self, uids: dict[str, float]) -> int:
        with self.lock:
            return sum(1 for u in uids if self.role.get(u) == c.ROLE_HEAD)

    def of(self, uids: dict[str, float], ns: str, cluster: str) -> list[str]:
        with self.lock:
            return [u for u in uids if self.cluster.get(u) == (ns, cluster)]

    def seen_times(self) -> list[float]:
        with self.lock:
            return list(self.seen.values())


class Workloads:
    """Pending pods and live Workloads of the way's namespaces, from one Workload watch
    (bench/curve.py says what counts as pending)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.lock = threading.Lock()
        self.pending: dict[str, int] = {}  # uid -> pods it holds pending

    def on_workload(self, event: str, wl: dict) -> None:
        meta = wl["metadata"]
        if not meta["namespace"].startswith(self.prefix):
            return
        with self.lock:
            if event == "DELETED":
                self.pending.pop(meta["uid"], None)
            else:
                self.pending[meta["uid"]] = curve.pending_pods(wl)

    def counts(self) -> tuple[int, int]:
        """(pending pods, live Workloads)."""
        with self.lock:
            return sum(self.pending.values()), len(self.pending)


# ---- one way --------------------------------------------------------------------------

class Scrapes:
    """Everything measured from outside, at one moment."""

    def __init__(self, stack: devstack.Stack, rest: Rest, kueue: tuple[str, str],
                 pids: dict[str, int], server: RaykueueServer | None = None) -> None:
        self.t = time.monotonic()
        api = rest.request("GET", "/metrics")
        self.api = scrape.parse(api, ("apiserver_request_total", "apiserver_storage_objects", WEBHOOK,
                                      "apiserver_request_duration_seconds", SIZES))
        etcd = scrape.fetch(f"http://127.0.0.1:{stack.ports['etcd']}/metrics")
        self.etcd = scrape.parse(etcd, ("etcd_mvcc_db_total_size", "etcd_debugging_mvcc_keys_total"))
        self.kueue = scrape.parse(scrape.fetch(*kueue), KUEUE_PREFIXES)
        self.procs = {name: scrape.proc_use(pid) for name, pid in pids.items()}
        operator = stack.procs["ray-operator"].ports["metrics"]
        self.operator = scrape.parse(scrape.fetch(f"http://127.0.0.1:{operator}/metrics"), OPERATOR_PREFIXES)
        self.raykueue = (scrape.parse(metrics_page(server.url, server.ca_file), RAYKUEUE_PREFIXES)
                         if server is not None else {})


class Checkpoints:
    """Scrapes taken as the pending-pod count crosses each checkpoint during the fill,
    and when the fill's two ends were first seen, by a thread that polls every second."""

    def __init__(self, checkpoints: list[int], take: Callable[[], Scrapes], pending: Callable[[], int],
                 full: Callable[[], bool], queued: Callable[[], int], units: int, settle: float) -> None:
        self.checkpoints, self.take, self.pending = checkpoints, take, pending
        self.full, self.queued, self.units, self.settle = full, queued, units, settle
        self.last_queued, self.changed_at = -1, time.monotonic()
        self.t0 = time.monotonic()
        self.reached: dict[int, tuple[float, int, Scrapes]] = {}  # checkpoint -> (s, pending, scrapes)
        self.peak = 0
        self.full_at: float | None = None
        self.done = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="checkpoints", daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self._poll()
            except Exception:  # a failed scrape must not end the run: the next poll tries again
                print(f"  checkpoint poll failed:\n{traceback.format_exc()}", flush=True)
            if self.done.is_set():
                return
            self.stop.wait(1.0)

    def _poll(self) -> None:
        pending = self.pending()
        self.peak = max(self.peak, pending)
        for cp in curve.crossed(self.checkpoints, self.reached, pending):
            self.reached[cp] = (time.monotonic() - self.t0, pending, self.take())
            print(f"    checkpoint {cp:,}: {pending:,} pending after {self.reached[cp][0]:.0f}s", flush=True)
        full = self.full()
        if full and self.full_at is None:
            self.full_at = time.monotonic() - self.t0
        queued = self.queued()
        if queued != self.last_queued:
            self.last_queued, self.changed_at = queued, time.monotonic()
        # Settled: no new Workload for `settle` seconds. A pod KubeRay created and Kueue
        # preempted before KubeRay's cache saw it holds KubeRay's scale expectation for the
        # group until its 30 s timeout, and then waits for the next event or KubeRay's
        # 300 s requeue: the fill does not wait for those (the table says how many).
        if full and (queued >= self.units or time.monotonic() - self.changed_at >= self.settle):
            self.done.set()


def requests_by(before: Scrapes, after: Scrapes) -> Counter[str]:
    """'VERB resource[/sub]' -> requests between two scrapes (dry runs left out)."""
    found: Counter[str] = Counter()
    for labels, v in after.api.get("apiserver_request_total", {}).items():
        d = dict(labels)
        if d.get("dry_run"):
            continue
        grown = v - before.api.get("apiserver_request_total", {}).get(labels, 0.0)
        if grown > 0:
            sub = f"/{d['subresource']}" if d.get("subresource") else ""
            found[f"{d.get('verb', '')} {d.get('resource', '')}{sub}"] += int(grown)
    return found


def storage_objects(s: Scrapes) -> float:
    return scrape.total(s.api, "apiserver_storage_objects")


def kueue_metrics_on(stack: devstack.Stack) -> tuple[str, str | None]:
    """Kueue's metrics address, and the config text to restore after the run where this
    stack's Kueue (one this run did not start, e.g. the e2e tests') serves none: then the
    address is written into its config, which the restart before each way picks up."""
    path = kueue_dir(stack.config) / "config.yaml"
    text = path.read_text()
    cfg = yaml.safe_load(text)
    bind = (cfg.get("metrics") or {}).get("bindAddress", "0")
    if bind != "0":
        return bind, None
    (port,) = devstack.free_ports(1)
    cfg["metrics"] = {**(cfg.get("metrics") or {}), "bindAddress": f"127.0.0.1:{port}"}
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return cfg["metrics"]["bindAddress"], text


def operator_with(stack: devstack.Stack, argv: list[str], concurrency: int | None) -> None:
    """Restart the KubeRay operator with `--reconcile-concurrency` (None: devstack's argv,
    which gives none, so KubeRay's default of 1)."""
    restart_component(stack, "ray-operator", argv=curve.with_concurrency(argv, CONCURRENCY_FLAG, concurrency))
    stack.wait_ready("ray-operator", lambda: COMPONENTS["ray-operator"].ready(stack))


def restart_kueue(stack: devstack.Stack) -> None:
    restart_component(stack, "kueue")
    stack.wait_ready("kueue", lambda: COMPONENTS["kueue"].ready(stack))  # its webhooks too


def run_way(stack: devstack.Stack, rest: Rest, kueue: tuple[str, str], way: str, args: argparse.Namespace,
            workdir: Path, label: str, concurrency: int | None) -> dict[str, Any]:
    fig: dict[str, Any] = {"way": label, "concurrency": concurrency or "1 (as shipped)"}
    per_pod_total = args.clusters * (args.workers + 1)
    cpu_each = -(-round(args.quota_fraction * per_pod_total) // args.queues)
    quota = cpu_each * args.queues
    unit = 1 if way == "raykueue" else args.workers + 1  # what Kueue admits at once, in pods
    want_running = min(per_pod_total, quota // unit * unit)
    fig.update(quota=quota, total_pods=per_pod_total)

    scrape.etcd_compact(f"http://127.0.0.1:{stack.ports['etcd']}")
    restart_kueue(stack)  # CPU and peak RSS of this way only
    server = None
    pids = {"kueue": stack.procs["kueue"].pid}
    if way == "raykueue":
        server = RaykueueServer(stack, workdir / label,
                                args=["--controller-identity", ADMIN,
                                      "--controller-identity", c.DEFAULT_CONTROLLER_IDENTITY],
                                env={"RAYKUEUE_LEADER_ELECTION": "false"}, ready_timeout=180)
        (workdir / label).mkdir(parents=True)
        server.start()
        assert server.proc is not None
        pids["raykueue"] = server.proc.pid
    tag = way if concurrency is None else f"{way}-c{concurrency}"  # namespaces of their own per turn
    namespaces = create_queues(rest, tag, args.queues, cpu_each)
    pods = Pods(f"cohort-{RUN}-{tag}-")
    watch = WatchCache(rest, PODS, label_selector=c.CLUSTER_LABEL)
    watch.add_handler(pods.on_pod)
    workloads = Workloads(f"cohort-{RUN}-{tag}-")
    wl_watch = WatchCache(rest, WORKLOADS)
    wl_watch.add_handler(workloads.on_workload)
    monitor: Checkpoints | None = None
    for w in (watch, wl_watch):
        w.start()
        w.wait_synced(60)
    try:
        s0 = Scrapes(stack, rest, kueue, pids, server)
        t0 = time.monotonic()
        names: list[tuple[str, str]] = []
        for i in range(args.clusters):
            ns, name = namespaces[i % args.queues], f"rc-{i}"
            rest.create(RAYCLUSTERS.path(ns), cluster_body(way, ns, name, args.workers))
            names.append((ns, name))
        fig["create_s"] = time.monotonic() - t0
        # Full: quota-many pods Running and, for raykueue, every head that fits among them
        # (heads outrank workers, so until then a head may still preempt a worker).
        want_heads = min(args.clusters, want_running) if way == "raykueue" else 0

        def full() -> bool:
            running = pods.running_now()
            return len(running) >= want_running and pods.heads(running) >= want_heads

        # Every pod asked for is in Kueue's hands: a Workload for each pod (raykueue,
        # which needs every pod created by KubeRay) or for each cluster (elastic).
        units = per_pod_total if way == "raykueue" else args.clusters

        monitor = Checkpoints(args.checkpoints, lambda: Scrapes(stack, rest, kueue, pids, server),
                              lambda: workloads.counts()[0], full, lambda: workloads.counts()[1], units,
                              args.settle)
        monitor.t0 = t0
        monitor.thread.start()
        if not monitor.done.wait(max(0.0, args.max_wait - (time.monotonic() - t0))):
            fig["fill_timeout"] = True
        monitor.stop.set()
        monitor.thread.join(30)
        fig["fill_s"] = time.monotonic() - t0
        fig["full_s"] = monitor.full_at
        fig["create_rate"] = curve.creation_rate(pods.seen_times(), t0)
        fig["checkpoints"] = dict(monitor.reached)
        fig["peak_pending"] = monitor.peak
        fig["not_queued"] = (max(0, per_pod_total - pods.created()) if way == "raykueue"
                             else max(0, units - workloads.counts()[1]) * (args.workers + 1))
        running = pods.running_now()
        fig.update(running=len(running), pending=per_pod_total - len(running), created=pods.created())
        s1 = Scrapes(stack, rest, kueue, pids, server)
        fig["s0"] = s0
        fig["fill"] = (s0, s1)
        fig["stored"] = {kind: sum(count(rest, path(ns)) for ns in namespaces) for kind, path in (
            ("pods", PODS.path), ("workloads", WORKLOADS.path),
            ("events", lambda ns: f"/api/v1/namespaces/{ns}/events"))}
        fig["workloads"] = fig["stored"]["workloads"]
        fig["events"] = sum((events_by_source(rest, ns) for ns in namespaces), Counter())
        print(f"  {way} fill: {fig['running']} Running, {fig['pending']} pending, {fig['created']} pods, "
              f"{fig['workloads']} Workloads after {fig['fill_s']:.0f}s"
              f"{' (bound reached)' if fig.get('fill_timeout') else ''}", flush=True)

        # free: a tenth of the admitted clusters (those whose head runs) deleted at once
        admitted = [(ns, n) for ns, n in names if any(
            True for _ in pods.of(running, ns, n))]
        whole = [(ns, n) for ns, n in admitted if len(pods.of(running, ns, n)) == args.workers + 1]
        victims = (whole or admitted)[:max(1, len(admitted) // 10)]
        freed = sum(len(pods.of(running, ns, n)) for ns, n in victims)
        before_free = set(running)
        t_free = time.monotonic()
        for ns, n in victims:
            rest.request("DELETE", RAYCLUSTERS.path(ns, n), query={"propagationPolicy": "Background"})

        def next_running() -> list[float]:
            return sorted(t - t_free for u, t in pods.running_now().items() if u not in before_free)

        try:
            wait_for(lambda: len(next_running()) >= min(freed, fig["pending"]), timeout=args.max_wait,
                     interval=0.5, message="the freed quota used again")
        except WaitTimeout:
            fig["free_timeout"] = True
        lags = next_running()[:freed]
        fig.update(freed_clusters=len(victims), freed=freed, next_running=len(lags),
                   free_p50=percentile(lags, 0.5) if lags else None,
                   free_p99=percentile(lags, 0.99) if lags else None)
        print(f"  {way} free: {len(victims)} clusters ({freed} pods) deleted; {len(lags)} pods ran next, "
              f"p50 {fig['free_p50']}, p99 {fig['free_p99']}", flush=True)

        # storm: an urgent cluster in the first queue preempts
        storm_ns = namespaces[0]
        settled = pods.running_now()
        deleted_before = set(pods.deleted)
        t_storm = time.monotonic()
        rest.create(RAYCLUSTERS.path(storm_ns),
                    cluster_body(way, storm_ns, STORM, args.storm_workers, URGENT_CLASS))

        def storm_running() -> int:
            return len(pods.of(pods.running_now(), storm_ns, STORM))

        try:
            wait_for(lambda: storm_running() >= args.storm_workers + 1, timeout=args.max_wait,
                     interval=0.5, message="the urgent cluster's pods Running")
        except WaitTimeout:
            fig["storm_timeout"] = True
        fig["storm_s"] = time.monotonic() - t_storm
        with pods.lock:
            gone = [u for u in pods.deleted if u not in deleted_before and u in settled]
        fig.update(storm_running=storm_running(), storm_deleted=len(gone))
        s2 = Scrapes(stack, rest, kueue, pids, server)
        fig["all"] = (s0, s2)
        fig["storm"] = (s1, s2)
        print(f"  {way} storm: {fig['storm_running']}/{args.storm_workers + 1} urgent pods Running after "
              f"{fig['storm_s']:.1f}s; {len(gone)} running pods deleted", flush=True)
    finally:
        if monitor is not None:
            monitor.stop.set()
        watch.stop()
        wl_watch.stop()
        delete_queues(rest, namespaces, args.max_wait)
        if server is not None:
            server.unregister()
            server.close()
    return fig


# ---- the table --------------------------------------------------------------------------

Row = tuple[str, list[str]]


def rows(results: list[dict[str, Any]]) -> list[Row]:
    def each(f: Callable[[dict[str, Any]], str]) -> list[str]:
        out = []
        for r in results:
            try:
                out.append(f(r))
            except (KeyError, TypeError, ZeroDivisionError):
                out.append("-")
        return out

    def per_k(r: dict[str, Any], v: float, fmt: str = ",.0f") -> str:
        if not r["pending"]:
            return f"{v:{fmt}}"
        return f"{v:{fmt}} ({v / r['pending'] * 1000:,.2f} per 1,000 pending)"

    def kueue(r: dict[str, Any], phase: str = "all") -> scrape.Samples:
        a, b = r[phase]
        return scrape.diff(b.kueue, a.kueue)

    def kueue_total(r: dict[str, Any], name: str, phase: str = "all", **match: str) -> float:
        return scrape.total(kueue(r, phase), name, **match)

    def proc(r: dict[str, Any], name: str) -> str:
        a, b = r["all"]
        if name not in b.procs:
            return "not running"
        cpu = b.procs[name].cpu_s - a.procs[name].cpu_s
        return f"{per_k(r, cpu, '.1f')} CPU s; peak RSS {b.procs[name].hwm_mib:.0f} MiB"

    def quant(r: dict[str, Any], hist: str) -> str:
        d = kueue(r)
        p50, p99, m = (scrape.quantile(d, hist, 0.5), scrape.quantile(d, hist, 0.99), scrape.mean(d, hist))
        return f"p50 {p50:.3f} / p99 {p99:.3f} / mean {m:.3f}" if m is not None else "none"

    def requests(r: dict[str, Any], writes_only: bool = False) -> str:
        a, b = r["all"]
        found = requests_by(a, b)
        return per_k(r, sum(v for k, v in found.items()
                            if not writes_only or k.split()[0] not in ("GET", "LIST", "WATCH")))

    def db(r: dict[str, Any]) -> str:
        a, b = r["fill"]
        mib = [scrape.total(x.etcd, "etcd_mvcc_db_total_size_in_use_in_bytes") / 2 ** 20 for x in (a, b)]
        return per_k(r, mib[1] - mib[0], ".1f")

    def client(r: dict[str, Any], source: str) -> str:
        a, b = r["all"]
        found = curve.by_method(scrape.diff(getattr(b, source), getattr(a, source)))
        return per_k(r, sum(found.values())) + ": " + ", ".join(
            f"{k} {v:,.0f}" for k, v in sorted(found.items(), key=lambda kv: -kv[1]) if v > 0)

    def kueue_reconciles(r: dict[str, Any]) -> str:
        found = scrape.by_label(kueue(r), "workqueue_adds_total", "name")
        return ", ".join(f"{k} {v:,.0f}" for k, v in sorted(found.items(), key=lambda kv: -kv[1]) if v > 0)

    def raykueue_writes(r: dict[str, Any]) -> str:
        a, b = r["all"]
        if not b.raykueue:
            return "not running"
        d: Counter[str] = Counter()
        for labels, v in scrape.diff(b.raykueue, a.raykueue).get("raykueue_api_writes_total", {}).items():
            d[f"{dict(labels).get('verb', '')} {dict(labels).get('resource', '')}"] += int(v)
        return per_k(r, sum(d.values())) + ": " + ", ".join(
            f"{k} {v:,.0f}" for k, v in sorted(d.items(), key=lambda kv: -kv[1]) if v > 0)

    def secs(v: float | None, timeout: bool = False) -> str:
        return ("-" if v is None else f"{v:.2f}") + (" (bound reached)" if timeout else "")

    def stored(r: dict[str, Any]) -> str:
        return " / ".join(f"{r['stored'][k]:,}" for k in ("pods", "workloads", "events"))

    return [
        ("nominal cpu over the cohort", each(lambda r: f"{r['quota']}")),
        ("pods asked for (heads + workers)", each(lambda r: f"{r['total_pods']:,}")),
        ("Running when the quota is full / pending pods", each(
            lambda r: f"{r['running']:,} / {r['pending']:,}")),
        ("stored when full: pods / Workloads / Events", each(stored)),
        ("KubeRay operator's reconcile concurrency", each(lambda r: f"{r['concurrency']}")),
        ("fill: create to quota full (s)", each(
            lambda r: secs(r["full_s"]) if r["full_s"] is not None else "not full (bound reached)")),
        ("fill: create to every pod queued in Kueue (s)", each(
            lambda r: secs(r["fill_s"], r.get("fill_timeout", False)))),
        ("fill: pods created a second (first create to last pod seen)", each(
            lambda r: f"{r['create_rate']:.2f}")),
        ("fill: pods not yet queued in Kueue when it ended (not created by KubeRay)", each(
            lambda r: f"{r['not_queued']:,}")),
        ("fill: Workloads Kueue preempted", each(
            lambda r: f"{kueue_total(r, 'kueue_preempted_workloads_total', 'fill'):.0f}")),
        ("fill: most pods pending at once (Workloads without quota)", each(
            lambda r: f"{r['peak_pending']:,}")),
        ("free: clusters deleted (pods freed)", each(lambda r: f"{r['freed_clusters']} ({r['freed']})")),
        ("free: freed quota -> next pod Running p50 (s)", each(
            lambda r: secs(r["free_p50"], r.get("free_timeout", False)))),
        ("free: freed quota -> next pod Running p99 (s)", each(lambda r: secs(r["free_p99"]))),
        ("storm: urgent pods Running", each(lambda r: f"{r['storm_running']}")),
        ("storm: until every urgent pod Running (s)", each(
            lambda r: secs(r["storm_s"], r.get("storm_timeout", False)))),
        ("storm: running pods deleted", each(lambda r: f"{r['storm_deleted']}")),
        ("storm: Workloads Kueue preempted", each(
            lambda r: f"{kueue_total(r, 'kueue_preempted_workloads_total', 'storm'):.0f}")),
        ("Kueue admission attempts", each(
            lambda r: per_k(r, kueue_total(r, "kueue_admission_attempts_total")))),
        ("  of which success", each(
            lambda r: f"{kueue_total(r, 'kueue_admission_attempts_total', result='success'):,.0f}")),
        ("Kueue admission attempt duration (cycle, s)", each(
            lambda r: quant(r, "kueue_admission_attempt_duration_seconds"))),
        ("Kueue admission wait (s)", each(lambda r: quant(r, "kueue_admission_wait_time_seconds"))),
        ("Kueue", each(lambda r: proc(r, "kueue"))),
        ("raykueue", each(lambda r: proc(r, "raykueue"))),
        ("Kueue reconciles by controller (its workqueue adds)", each(kueue_reconciles)),
        ("API requests", each(requests)),
        ("  sent by the KubeRay operator (its client-go, by method)", each(lambda r: client(r, "operator"))),
        ("  raykueue controller's writes (its own counter)", each(raykueue_writes)),
        ("  of which writes", each(lambda r: requests(r, writes_only=True))),
        ("etcd DB in use added by fill (MiB, history compacted before)", each(db)),
        ("etcd keys added by fill", each(lambda r: per_k(r, scrape.total(r["fill"][1].etcd, KEYS)
                                                          - scrape.total(r["fill"][0].etcd, KEYS)))),
    ]


GROWTH_HEADER = ("checkpoint (pending pods)", "way", "reached after (s)", "pending then",
                 "Kueue CPU s per 1,000", "Kueue cycle mean / p99 (s)", "Kueue RSS MiB",
                 "raykueue CPU s per 1,000", "raykueue RSS MiB", "API requests per 1,000 (writes)",
                 "etcd keys", "etcd DB in use MiB")


def growth_rows(results: list[dict[str, Any]]) -> list[list[str]]:
    """One row per checkpoint each way reached: what the fill had cost from its start to
    the crossing, per 1,000 of the pods pending then, and what was held at that moment."""
    marks = sorted({cp for r in results for cp in r.get("checkpoints", {})})
    return [growth_row(cp, r) for cp in marks for r in results if cp in r.get("checkpoints", {})]


def growth_row(cp: int, r: dict[str, Any]) -> list[str]:
    t, pending, s = r["checkpoints"][cp]
    a = r["s0"]
    k = scrape.diff(s.kueue, a.kueue)
    hist = "kueue_admission_attempt_duration_seconds"
    m, p99 = scrape.mean(k, hist), scrape.quantile(k, hist, 0.99)
    cycle = f"{m:.3f} / {p99:.3f}" if m is not None and p99 is not None else "none"

    def k1(v: float, fmt: str = ".2f") -> str:
        x = curve.per_thousand(v, pending)
        return "-" if x is None else f"{x:{fmt}}"

    def cpu(name: str) -> str:
        return k1(s.procs[name].cpu_s - a.procs[name].cpu_s) if name in s.procs else "not running"

    def rss(name: str) -> str:
        return f"{s.procs[name].rss_mib:.0f}" if name in s.procs else "not running"

    found = requests_by(a, s)
    writes = sum(v for key, v in found.items() if key.split()[0] not in ("GET", "LIST", "WATCH"))
    db = scrape.total(s.etcd, "etcd_mvcc_db_total_size_in_use_in_bytes") / 2 ** 20
    return [f"{cp:,}", r["way"], f"{t:.0f}", f"{pending:,}", cpu("kueue"), cycle, rss("kueue"),
            cpu("raykueue"), rss("raykueue"), f"{k1(sum(found.values()), ',.0f')} ({k1(writes, ',.0f')})",
            f"{scrape.total(s.etcd, KEYS):,.0f}", f"{db:.1f}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--workers", type=int, default=50)
    parser.add_argument("--quota-fraction", type=float, default=0.33)
    parser.add_argument("--queues", type=int, default=4, help="ClusterQueues in the cohort")
    parser.add_argument("--storm-workers", type=int, default=200)
    parser.add_argument("--ways", default=",".join(WAYS))
    parser.add_argument("--max-wait", type=float, default=900, help="bound on each phase, seconds")
    parser.add_argument("--checkpoints", default="1000,5000,10000",
                        help="pending-pod counts at which the fill's figures are taken (the growth curve)")
    parser.add_argument("--kuberay-concurrency", default="",
                        help="comma-separated reconcile concurrencies for the KubeRay operator, each a "
                             "turn of every way (default: none given, KubeRay's own 1)")
    parser.add_argument("--settle", type=float, default=60,
                        help="the fill ends, quota full, once no new Workload came for this long")
    parser.add_argument("--node-capacity", type=int, default=0,
                        help="pods and CPU of each kwok node of a stack this run starts (default: room "
                             "for the quota and the storm)")
    parser.add_argument("--keep-stack", action="store_true")
    args = parser.parse_args()
    ways = [w for w in args.ways.split(",") if w]
    if set(ways) - set(WAYS):
        parser.error(f"unknown ways; known: {', '.join(WAYS)}")
    try:
        args.checkpoints = curve.parse_checkpoints(args.checkpoints)
        concurrencies: list[int | None] = [int(x) for x in args.kuberay_concurrency.split(",") if x] or [None]
    except ValueError as e:
        parser.error(str(e))

    config = devstack.StackConfig()
    if config.kueue_mode != "shipped":
        parser.error("Kueue's elastic RayCluster needs Kueue as shipped (RAYKUEUE_KUEUE=shipped)")
    (metrics_port,) = devstack.free_ports(1)
    config.kueue_config = {"metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"}}
    per_pod_total = args.clusters * (args.workers + 1)
    room = round(args.quota_fraction * per_pod_total) + args.storm_workers + 2 * args.queues + 10
    config.nodes.count = KWOK_NODES
    per_node = args.node_capacity or max(110, -(-room // KWOK_NODES) + 10)
    config.nodes.capacity = {"cpu": str(per_node), "memory": f"{per_node}Gi", "nvidia.com/gpu": "0",
                             "pods": str(per_node)}
    config.ready_timeout = 300
    # A user of the stack (our pid) until the release below: a stack of a test session
    # stays the session's; one this run starts goes with the release (kept with --keep-stack).
    stack, _ = devstack.up("e2e", config, user_pid=os.getpid(), by_hand=args.keep_stack)
    bind, restore = kueue_metrics_on(stack)
    operator_argv = list(stack.procs["ray-operator"].argv)
    api = load_api_client(str(stack.kubeconfig))
    assert api is not None
    rest = Rest(api)
    results: list[dict[str, Any]] = []
    failed: list[str] = []
    t_run = time.monotonic()
    print(f"stack at {stack.dir}: {args.clusters} clusters x (head + {args.workers} workers), quota "
          f"{args.quota_fraction} of {per_pod_total:,} pods over {args.queues} ClusterQueues; storm "
          f"{args.storm_workers} workers; ways in turn: {', '.join(ways)}", flush=True)
    try:
        kueue = (f"https://{bind}/metrics", scrape.metrics_token(rest))
        workdir = Path(tempfile.mkdtemp(prefix="raykueue-cohort-"))
        for concurrency in concurrencies:
            if concurrency is not None:
                operator_with(stack, operator_argv, concurrency)
            for way in ways:
                label = way if len(concurrencies) == 1 else f"{way} (KubeRay x{concurrency})"
                print(f"turn {label}", flush=True)
                try:
                    results.append(run_way(stack, rest, kueue, way, args, workdir, label, concurrency))
                except (KeyboardInterrupt, SystemExit):
                    raise
                except Exception:
                    failed.append(label)
                    print(f"  {label} FAILED:\n{traceback.format_exc()}", flush=True)
    finally:
        if restore is not None:  # a stack this run did not start is left as it was found
            (kueue_dir(stack.config) / "config.yaml").write_text(restore)
            restart_kueue(stack)
        if stack.procs["ray-operator"].argv != operator_argv:  # the operator as devstack starts it
            operator_with(stack, operator_argv, None)
        devstack.release(config, os.getpid())
    print(f"\nOne run, {time.monotonic() - t_run:.0f}s; ways in turn, Kueue restarted before each:\n")
    print("| figure | " + " | ".join(r["way"] for r in results) + " |")
    print("|---|" + "---|" * len(results))
    for name, values in rows(results):
        print(f"| {name} | " + " | ".join(values) + " |")
    growth = growth_rows(results)
    if growth:
        print(f"\nGrowth curve: the fill's figures as the pending pods crossed {args.checkpoints} "
              "(cost from the fill's start, per 1,000 pods pending at the crossing):\n")
        print("| " + " | ".join(GROWTH_HEADER) + " |")
        print("|---|" + "---|" * (len(GROWTH_HEADER) - 1))
        for row in growth:
            print("| " + " | ".join(row) + " |")
    for r in results:
        for cp, (_, pending, s) in sorted(r.get("checkpoints", {}).items()):
            top = requests_by(r["s0"], s).most_common(10)
            print(f"{r['way']} at {cp:,} pending, API requests per 1,000 pending (verb resource): "
                  + "; ".join(f"{k} {v / pending * 1000:,.0f}" for k, v in top))
    for r in results:
        a, b = r["all"]
        top = requests_by(a, b).most_common(12)
        print(f"\n{r['way']} API requests, largest (verb resource: count, per 1,000 pending): " + "; ".join(
            f"{k}: {v} ({v / max(1, r['pending']) * 1000:.0f})" for k, v in top))
        d = scrape.diff(b.api, a.api)
        hooks = sorted({dict(labels).get("name", "") for labels, v in d.get(WEBHOOK + "_count", {}).items()
                        if v > 0})
        print(f"{r['way']} webhooks as the API server timed them (calls, p50 / mean s): " + "; ".join(
            f"{n}: {scrape.total(d, WEBHOOK + '_count', name=n):.0f}, "
            f"{scrape.quantile(d, WEBHOOK, 0.5, name=n) or 0:.3f} / "
            f"{scrape.mean(d, WEBHOOK, name=n) or 0:.3f}"
            for n in hooks))
        sizes: Counter[str] = Counter()
        for labels, v in d.get(SIZES + "_sum", {}).items():
            x = dict(labels)
            if x.get("verb") in ("LIST", "GET") and v > 0:
                sizes[f"{x['verb']} {x.get('resource', '')}"] += v
        calls = requests_by(a, b)
        print(f"{r['way']} reads, largest by bytes returned (verb resource: requests, MiB): " + "; ".join(
            f"{k}: {calls.get(k, 0)}, {v / 2 ** 20:.1f}" for k, v in sizes.most_common(8)))
        post = {"verb": "POST", "resource": "pods", "subresource": ""}
        print(f"{r['way']} POST pods as the API server timed them: p50 "
              f"{scrape.quantile(d, 'apiserver_request_duration_seconds', 0.5, **post) or 0:.3f} s, mean "
              f"{scrape.mean(d, 'apiserver_request_duration_seconds', **post) or 0:.3f} s")
        print(f"{r['way']} Events in the bench namespaces when full (component, reason: count): " + "; ".join(
            f"{src}, {reason}: {v}" for (src, reason), v in r["events"].most_common()))
        grown = {k: v for k, v in scrape.by_label(b.api, "apiserver_storage_objects", "resource").items()
                 if v - scrape.by_label(a.api, "apiserver_storage_objects", "resource").get(k, 0) > 0}
        print(f"{r['way']} storage objects at the end, where they grew: "
              + ", ".join(f"{k} {v:.0f}" for k, v in sorted(grown.items())))
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed or not results else 0


if __name__ == "__main__":
    interruptible()
    sys.exit(main())
