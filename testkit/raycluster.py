"""The Ray tier's objects, shared by tests/ray and bench/elastic.py.

`raycluster()` is the tier's RayCluster (opted in, autoscaler v2), `for_way()` the
same cluster queued another way (Kueue's elastic RayCluster, raykueue gang),
`RayCluster` a running one with a Ray driver to ask (devstack/ray/driver.py), and
`Observer` / `observed` watch a namespace's pods and Workloads over a whole scenario.

Churn is what happens between two looks, so it is counted from watch events,
never from a final listing: every pod and Workload created and deleted, and
every worker pod that ever ran. The same events say how each Ray pod went:
created gated, its Workload admitted, running.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from devstack.ray import driver as ray_driver
from devstack.ray.procs import RayProcess
from devstack.ray.runner import RayClusterRunner
from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.kube.resources import PODS
from raykueue.kube.rest import ApiError, Rest
from testkit.pods import gated, role, running
from testkit.standins import WORKLOADS

# A head starts in seconds on an idle machine; on a busy one a start can take a
# minute and be tried again (devstack.ray.runner.START_ATTEMPTS).
HEAD_TIMEOUT = 300


def opted_in(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A Ray object opted in to raykueue as the README says, on the test queue's LocalQueue."""
    return {"apiVersion": "ray.io/v1", "kind": kind,
            "metadata": {"name": name, "labels": {c.QUEUE_LABEL: "team-a"},
                         "annotations": {c.STANDALONE_ANNOTATION: "true"}},
            "spec": spec}


def raycluster(name: str, *, idle_seconds: int = 60, autoscaler_env: dict[str, str] | None = None,
               max_workers: int = 10, min_workers: int = 0) -> dict[str, Any]:
    """An opted-in RayCluster, autoscaler v2 on, `min_workers` workers until Ray asks for more.

    Quota per pod: the head 1 CPU (its container 750m and the autoscaler
    sidecar's 250m, which KubeRay adds to the head pod), a worker 1 CPU.
    """
    def container(role: str, cpu: str) -> dict[str, Any]:
        res = {"cpu": cpu, "memory": "1Gi"}
        return {"name": f"ray-{role}", "image": "rayproject/ray:2.60.0",
                "resources": {"requests": res, "limits": res}}

    options: dict[str, Any] = {
        "version": "v2", "idleTimeoutSeconds": idle_seconds,
        "resources": {"requests": {"cpu": "250m", "memory": "512Mi"},
                      "limits": {"cpu": "250m", "memory": "512Mi"}}}
    if autoscaler_env:
        options["env"] = [{"name": k, "value": v} for k, v in autoscaler_env.items()]
    return opted_in("RayCluster", name, {
        "enableInTreeAutoscaling": True,
        "autoscalerOptions": options,
        # no tasks on the head, as in KubeRay's autoscaling examples
        "headGroupSpec": {"rayStartParams": {"num-cpus": "0"},
                          "template": {"spec": {"containers": [container("head", "750m")]}}},
        "workerGroupSpecs": [{
            "groupName": "cpu", "replicas": min_workers, "minReplicas": min_workers,
            "maxReplicas": max_workers,
            "rayStartParams": {},
            "template": {"spec": {"containers": [container("worker", "1")]}},
        }],
    })


# How a RayCluster is queued (bench/elastic.py compares them on the same cluster).
WAYS = ("kueue-elastic", "kueue-partial", "raykueue", "raykueue-gang")
ELASTIC_ANNOTATION = "kueue.x-k8s.io/elastic-job"  # Kueue's workload slices
SCALE_UP_ANNOTATION = "kueue.x-k8s.io/elastic-job-scale-up-strategy"  # Kueue v0.20+, alpha


def for_way(body: dict[str, Any], way: str, whole_priority_class: str = "ray-head") -> dict[str, Any]:
    """`raycluster()`'s body (opted in to raykueue) queued `way`; the spec is left alone.

    Kueue's ways drop the opt-in for its elastic-job annotation and give the one
    Workload Kueue makes for the whole cluster `whole_priority_class`.
    """
    meta = body["metadata"]
    if way in ("kueue-elastic", "kueue-partial"):
        del meta["annotations"][c.STANDALONE_ANNOTATION]
        meta["annotations"][ELASTIC_ANNOTATION] = "true"
        meta["labels"][c.PRIORITY_CLASS_LABEL] = whole_priority_class
        if way == "kueue-partial":
            meta["annotations"][SCALE_UP_ANNOTATION] = "partial"
    elif way == "raykueue-gang":
        meta["annotations"][c.GANG_ANNOTATION] = "true"
    elif way != "raykueue":
        raise ValueError(f"unknown way {way!r}; known: {', '.join(WAYS)}")
    return body


def millicores(value: Any) -> int:
    text = str(value)
    return int(text[:-1]) if text.endswith("m") else int(float(text) * 1000)


def reserved_cpu(wl: dict[str, Any]) -> int:
    """Millicores a Workload holds, as Kueue counts them (v0.19 pkg/workload
    totalRequestsFromAdmission): each podSet assignment's usage while quota is reserved
    and the Workload is not finished, scaled down to the podSet's count now, less its
    reclaimable pods (an elastic job scaled down lowers the count in place; a gang base
    hands slots back through reclaimablePods). The ClusterQueue's status is written from
    the same accounting later, on Kueue's schedule."""
    if not w.is_quota_reserved(wl) or w.is_finished(wl):
        return 0
    status = wl.get("status") or {}
    counts = {ps["name"]: ps.get("count", 1) for ps in (wl.get("spec") or {}).get("podSets") or []}
    reclaim = {r["name"]: r.get("count", 0) for r in status.get("reclaimablePods") or []}
    total = 0
    for a in (status.get("admission") or {}).get("podSetAssignments") or []:
        cpu = millicores(a.get("resourceUsage", {}).get("cpu", "0"))
        admitted = a.get("count", counts.get(a["name"], 1))
        now = counts.get(a["name"], admitted) - reclaim.get(a["name"], 0)
        total += cpu * now // admitted if admitted and now < admitted else cpu
    return total


def workload_is_of(wl: dict[str, Any], cluster: str) -> bool:
    """Whether a Workload stands for `cluster` or one of its pods, whoever made it: its
    name starts with the pod's or the cluster's (raykueue) or is raycluster-<name>- (Kueue)."""
    return wl["metadata"]["name"].startswith((f"{cluster}-", f"raycluster-{cluster}-"))


@dataclass
class RayCluster:
    namespace: str
    name: str
    runner: RayClusterRunner
    driver: RayProcess

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        self.runner.tier.check()
        return ray_driver.ask(self.driver, request)

    def joined_workers(self) -> set[str]:
        """Pod names of the worker nodes alive in Ray."""
        return {n["pod"] for n in self.ask({"op": "nodes"})["nodes"]
                if n["alive"] and n["pod"] != self.runner.head_pod}


@dataclass
class Seen:
    created: dict[str, set[str]] = field(default_factory=lambda: {"worker": set(), "Workload": set()})
    deleted: dict[str, set[str]] = field(default_factory=lambda: {"worker": set(), "Workload": set()})
    ran: set[str] = field(default_factory=set)  # worker pods (uid) seen Running
    max_workers_running: int = 0
    errors: list[str] = field(default_factory=list)
    # Every Ray pod (head or worker), by uid: its name, whether the first look at it
    # (its creation, for a pod made while watched) had the gate, whether it ran, and
    # whether a Workload of its own was seen admitted.
    pod_names: dict[str, str] = field(default_factory=dict)
    created_gated: set[str] = field(default_factory=set)
    pods_ran: set[str] = field(default_factory=set)
    admitted_pods: set[str] = field(default_factory=set)

    def churn(self) -> dict[str, Any]:
        admitted = len(self.ran)
        created = len(self.created["worker"])
        return {
            "worker_pods_created": created,
            "worker_pods_deleted": len(self.deleted["worker"]),
            "workers_ran": admitted,
            "pods_per_admitted_worker": round(created / admitted, 2) if admitted else None,
            "workloads_created": len(self.created["Workload"]),
            "workloads_deleted": len(self.deleted["Workload"]),
        }


class Observer:
    """Follows a namespace's pods and Workloads from a listing on. `on_workload(event,
    Workload)` hears every Workload event too (the listing's items as ADDED)."""

    def __init__(self, admin: Rest, namespace: str,
                 on_workload: Callable[[str, dict[str, Any]], None] | None = None):
        self.admin, self.namespace = admin, namespace
        self.on_workload = on_workload
        self.seen = Seen()
        self._running: set[str] = set()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._follow, args=(path, kind), daemon=True)
                         for path, kind in ((PODS.path(namespace), "worker"),
                                            (WORKLOADS.path(namespace), "Workload"))]
        self._lock = threading.Lock()
        self._ready = threading.Barrier(len(self._threads) + 1)

    def _record(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        if kind == "Workload" and self.on_workload is not None:
            self.on_workload(event, obj)
        uid = obj["metadata"]["uid"]
        if kind == "worker" and role(obj) in c.MANAGED_ROLES:
            if uid not in self.seen.pod_names and gated(obj):
                self.seen.created_gated.add(uid)
            self.seen.pod_names[uid] = obj["metadata"]["name"]
            if running(obj):
                self.seen.pods_ran.add(uid)
        if kind == "Workload" and w.is_admitted(obj) and w.pod_uid_of(obj):
            self.seen.admitted_pods.add(str(w.pod_uid_of(obj)))
        if kind == "worker":
            if role(obj) != c.ROLE_WORKER:
                return
            if running(obj):
                self.seen.ran.add(uid)
                self._running.add(uid)
            else:
                self._running.discard(uid)
        if event == "ADDED":
            self.seen.created[kind].add(uid)
        elif event == "DELETED":
            self.seen.deleted[kind].add(uid)
            self._running.discard(uid)
        self.seen.max_workers_running = max(self.seen.max_workers_running, len(self._running))

    def _follow(self, path: str, kind: str) -> None:
        listing = self.admin.get(path)
        with self._lock:
            for obj in listing["items"]:
                self._record(kind, "ADDED", obj)
        version = listing["metadata"]["resourceVersion"]
        self._ready.wait()
        while not self._stop.is_set():
            try:
                with self.admin.watch(path, {"resourceVersion": version, "allowWatchBookmarks": True},
                                      timeout_seconds=5) as stream:
                    for ev in stream:
                        version = ev["object"]["metadata"].get("resourceVersion", version)
                        if ev["type"] in ("ADDED", "MODIFIED", "DELETED"):
                            with self._lock:
                                self._record(kind, ev["type"], ev["object"])
                        if self._stop.is_set():
                            break
            except ApiError as e:  # 410 would lose events: that must fail the count
                self.seen.errors.append(f"{kind} watch: {e}")
                return

    def start(self) -> Observer:
        for t in self._threads:
            t.start()
        self._ready.wait(timeout=30)
        return self

    def stop(self) -> Seen:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=15)
        return self.seen


@contextmanager
def observed(admin: Rest, namespace: str) -> Iterator[Seen]:
    obs = Observer(admin, namespace).start()
    try:
        yield obs.seen
    finally:
        obs.stop()
    assert not obs.seen.errors, obs.seen.errors
