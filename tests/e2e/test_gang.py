"""Gang start on the shipped stack: two clusters that each need a head and 4 workers, room for one.

With `raykueue.io/gang: "true"` one cluster starts whole and the other waits
whole (not one pod released, no Workload of it admitted) until the first goes;
without it, pod-by-pod admission leaves both half started. `GangWatch`
(`invariants.GangInvariants`) watches the namespace for each whole scenario:
never a pod past the gate without a Workload holding quota covering it (its own,
or a slot of its gang's base), never the ClusterQueue over nominal, never an
extra running on after its base is preempted; every wait checks them.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from raykueue.controller import workload as w
from raykueue.controller.gang import base as gb
from raykueue.core import contract as c
from raykueue.kube import resources as r
from raykueue.kube.cache import WatchCache
from raykueue.kube.rest import Rest
from testkit.e2e.controller import (  # noqa: F401 - fixtures
    CQS,
    RAYCLUSTERS,
    admin,
    controller,
    cq_usage,
    millicores,
    pods,
    queue,
    raycluster,
    webhooks,
)
from testkit.e2e.gang import (
    BASE,
    GangWatch,
    base_of,
    cluster,
    cq_cpu_reaches_held,
    own_workload_pods,
    started,
    until,
)
from testkit.e2e.kueue_shipped import kueue_as_shipped, watched  # noqa: F401 - fixtures
from testkit.invariants import WORKLOADS
from testkit.pods import gated
from testkit.servers import RaykueueServer
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture
from testkit.watches import Watching


def ours(pod: dict[str, Any]) -> bool:
    return (pod["metadata"].get("labels") or {}).get(c.MANAGED_BY_LABEL) == c.MANAGED_BY_VALUE


def api_writes(server: RaykueueServer) -> float:
    return server.metric_total("raykueue_api_writes_total")


def waiting_whole(api: Rest, ns: str, name: str) -> bool:
    live = [p for p in pods(api, ns, name) if not p["metadata"].get("deletionTimestamp")]
    return len(live) == BASE and all(gated(p) for p in live)


def test_two_gangs_in_room_for_one_start_one_at_a_time(admin, controller, queue):  # noqa: F811
    ns = queue(cpu="3", memory="3Gi")  # room for one cluster of 5 x 500m, not two
    with watched(admin, ns), GangWatch(admin, ns) as gw:
        gw.held.add("b")
        admin.create(RAYCLUSTERS.path(ns), cluster("a", gang=True))
        until(gw, lambda: len(started(admin, ns, "a")) == BASE, timeout=120,
              message="cluster a started whole")
        base = base_of(admin, ns, "a")
        assert base is not None and w.is_admitted(base)
        assert {ps["name"]: ps["count"] for ps in base["spec"]["podSets"]} == {"head": 1, "cpu": 4}
        (ref,) = base["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["controller"]) == ("RayCluster", "a", False)
        window = gw.release_window("a")

        admin.create(RAYCLUSTERS.path(ns), cluster("b", gang=True))
        until(gw, lambda: waiting_whole(admin, ns, "b") and base_of(admin, ns, "b") is not None,
              timeout=120, message="cluster b's five pods gated and its base Workload queued")
        b_base = base_of(admin, ns, "b")
        assert b_base is not None and not w.is_quota_reserved(b_base)
        # Nothing of b holds quota: only a's base does.
        assert not [x for x in admin.get(WORKLOADS.path(ns))["items"]
                    if x["metadata"]["labels"].get(c.CLUSTER_LABEL) == "b" and not gb.is_base(x)]

        with gw._lock:
            gw.held.discard("b")
        admin.delete(RAYCLUSTERS.path(ns, "a"))
        until(gw, lambda: len(started(admin, ns, "b")) == BASE, timeout=180,
              message="cluster b started whole once a was gone")
        writes = api_writes(controller)
        created = len(gw.created)
        gw.assert_held()
    print(f"\nGANG: base release window {window:.2f}s (cluster a); "
          f"API writes {writes:.0f} for {created} pods = {writes / created:.2f} per pod")


def test_without_the_annotation_both_clusters_half_start(admin, controller, queue):  # noqa: F811
    """The state gang start exists to prevent: quota held by two clusters neither complete."""
    ns = queue(cpu="3", memory="3Gi")
    with watched(admin, ns), GangWatch(admin, ns) as gw:
        for name in ("a", "b"):
            admin.create(RAYCLUSTERS.path(ns), cluster(name, gang=False))

        def half_started() -> tuple[int, int] | None:
            counts = (len(started(admin, ns, "a")), len(started(admin, ns, "b")))
            return counts if sum(counts) == 6 else None

        counts = until(gw, half_started, timeout=120, message="six of ten pods started")
        # Both heads hold quota, so at most one cluster is whole and the other holds
        # quota it cannot use (how the six split depends on Kueue's order).
        assert all(counts), f"both heads run: {counts}"
        assert any(0 < n < BASE for n in counts), f"a cluster part-started: {counts}"
        writes = api_writes(controller)
        created = len(gw.created)
        gw.assert_held()
    print(f"\nNO GANG: API writes {writes:.0f} for {created} pods = {writes / created:.2f} per pod")


class QuotaWatch(Watching):
    """Quota the ClusterQueue holds against the pods that run, on every change of either.

    Excess is reserved cpu beyond what the namespace's released, not deleting
    raykueue pods request (500m each): quota held for pods that are gone. Each
    stretch of excess is timed; the longest is the settle window.
    """

    def __init__(self, api: Rest, ns: str) -> None:
        self.ns, self.cq = ns, f"e2e-{ns}"
        self.pods = WatchCache(api, r.PODS, namespace=ns)
        self.cqs = WatchCache(api, CQS)
        self.windows: list[float] = []
        self._since: float | None = None
        self._lock = threading.Lock()
        self.caches = (self.pods, self.cqs)
        for cache in self.caches:
            cache.add_handler(lambda *_: self._check())

    def excess(self) -> int:
        cq = self.cqs.get(None, self.cq) or {}
        held = sum(millicores(res.get("total", "0"))
                   for flavor in (cq.get("status") or {}).get("flavorsReservation") or []
                   for res in flavor.get("resources") or [] if res["name"] == "cpu")
        live = [p for p in self.pods.list(self.ns) if ours(p) and not gated(p)
                and not p["metadata"].get("deletionTimestamp")]
        return held - 500 * len(live)

    def _check(self) -> None:
        now = time.monotonic()
        with self._lock:
            if self.excess() > 0:
                self._since = self._since if self._since is not None else now
            elif self._since is not None:
                self.windows.append(now - self._since)
                self._since = None

    def open_excess(self) -> bool:
        with self._lock:
            return self._since is not None


def scale(api: Rest, ns: str, name: str, replicas: int, victims: list[str]) -> None:
    group = cluster(name, gang=True)["spec"]["workerGroupSpecs"][0]
    group.update(replicas=replicas, minReplicas=2, scaleStrategy={"workersToDelete": victims})
    api.merge_patch(RAYCLUSTERS.path(ns, name), {"spec": {"workerGroupSpecs": [group]}})


def test_scale_down_of_base_pods_moves_extras_in_and_quota_follows(admin, controller, queue):  # noqa: F811
    """The autoscaler deletes base workers while extras live: each extra moves into the base."""
    ns = queue(cpu="10", memory="10Gi")
    with watched(admin, ns), GangWatch(admin, ns) as gw, QuotaWatch(admin, ns) as qw:
        obj = cluster("a", gang=True)
        obj["spec"]["workerGroupSpecs"][0]["minReplicas"] = 2  # base: head + 2; 2 extras
        admin.create(RAYCLUSTERS.path(ns), obj)
        until(gw, lambda: len(started(admin, ns, "a")) == BASE and len(own_workload_pods(admin, ns)) == 2,
              timeout=120, message="head, 2 base workers and 2 extras running")
        cq_cpu_reaches_held(gw, admin, ns, 2500)
        for replicas in (3, 2):
            extras = own_workload_pods(admin, ns)
            base_workers = sorted(p["metadata"]["name"] for p in started(admin, ns, "a")
                                  if p["metadata"]["uid"] not in extras
                                  and p["metadata"]["labels"][c.NODE_TYPE_LABEL] == "worker")
            scale(admin, ns, "a", replicas, base_workers[:1])
            until(gw, lambda r=replicas: len(own_workload_pods(admin, ns)) == r - 2
                  and len(started(admin, ns, "a")) == r + 1,
                  timeout=120, message=f"an extra moved into the base ({replicas} workers)")
            cq_cpu_reaches_held(gw, admin, ns, 500 * (replicas + 1))
        until(gw, lambda: not qw.open_excess(), timeout=30, message="no quota held for gone pods")
        gw.assert_held()
    print(f"\nGANG SCALE-DOWN: quota held beyond live pods for at most "
          f"{max(qw.windows, default=0.0):.2f}s ({len(qw.windows)} stretches)")


def test_api_writes_per_pod_with_and_without_gang(admin, controller, queue):  # noqa: F811
    """One cluster of 5, started, running Ready, then deleted: raykueue's writes, each way."""
    ns = queue(cpu="10", memory="10Gi")
    per_pod: dict[bool, float] = {}
    with watched(admin, ns), GangWatch(admin, ns) as gw:
        for gang in (False, True):
            name = "g" if gang else "p"
            before = api_writes(controller)
            admin.create(RAYCLUSTERS.path(ns), cluster(name, gang=gang))
            until(gw, lambda n=name: len(started(admin, ns, n)) == BASE, timeout=120,
                  message=f"cluster {name} running")

            def ready(n: str = name) -> bool:
                wls = [x for x in admin.get(WORKLOADS.path(ns))["items"]
                       if x["metadata"]["labels"].get(c.CLUSTER_LABEL) == n]
                return bool(wls) and all(w.is_true(x, w.PODS_READY) for x in wls)

            until(gw, ready, timeout=120, message=f"PodsReady on every Workload of {name}")
            admin.delete(RAYCLUSTERS.path(ns, name))
            until(gw, lambda n=name: not pods(admin, ns, n) and not [
                x for x in admin.get(WORKLOADS.path(ns))["items"]
                if x["metadata"]["labels"].get(c.CLUSTER_LABEL) == n],
                timeout=120, message=f"cluster {name} and its Workloads gone")
            per_pod[gang] = (api_writes(controller) - before) / BASE
        gw.assert_held()
    print(f"\nWRITES PER POD: pod by pod {per_pod[False]:.2f}, gang {per_pod[True]:.2f}")
    assert per_pod[True] < per_pod[False]


def test_preemption_takes_an_extra_never_the_base(admin, controller, queue):  # noqa: F811
    """b's base (head priority) needs room a's extras (worker priority) hold: one extra goes."""
    ns = queue(cpu="3500m", memory="3584Mi", preemption=True)  # room for 7 pods
    with watched(admin, ns), GangWatch(admin, ns) as gw:
        a_obj = cluster("a", gang=True)
        a_obj["spec"]["workerGroupSpecs"][0]["minReplicas"] = 2  # base: head + 2; 2 extras
        admin.create(RAYCLUSTERS.path(ns), a_obj)
        until(gw, lambda: len(started(admin, ns, "a")) == BASE and len(own_workload_pods(admin, ns)) == 2,
              timeout=120, message="a: head, 2 base workers and 2 extras running")
        a_base = base_of(admin, ns, "a")
        assert a_base is not None
        a_base_pods = {p["metadata"]["uid"] for p in started(admin, ns, "a")} - own_workload_pods(admin, ns)

        b_obj = cluster("b", gang=True)
        b_obj["spec"]["workerGroupSpecs"][0].update(replicas=2, minReplicas=2)
        admin.create(RAYCLUSTERS.path(ns), b_obj)
        until(gw, lambda: len(started(admin, ns, "b")) == 3, timeout=120, message="b started whole")
        # a keeps its base (same Workload, same pods) and one extra; the other extra was taken.
        until(gw, lambda: len(started(admin, ns, "a")) == 4, timeout=60, message="a down to 4 pods")
        now_base = base_of(admin, ns, "a")
        assert now_base is not None and now_base["metadata"]["uid"] == a_base["metadata"]["uid"]
        assert w.is_admitted(now_base) and not w.is_evicted(now_base)
        assert a_base_pods <= {p["metadata"]["uid"] for p in started(admin, ns, "a")}
        gw.assert_held()


def test_a_head_only_gang_cluster_starts_as_a_gang_of_its_head(admin, controller, queue):  # noqa: F811
    """A RayCluster with no worker groups (KubeRay's workerGroupSpecs is optional) is a gang
    of its head alone: admitted through a base of one head podSet, never refused."""
    ns = queue(cpu="3", memory="3Gi")
    obj = cluster("h", gang=True)
    del obj["spec"]["workerGroupSpecs"]
    with watched(admin, ns), GangWatch(admin, ns) as gw:
        admin.create(RAYCLUSTERS.path(ns), obj)
        until(gw, lambda: len(started(admin, ns, "h")) == 1, timeout=120,
              message="the head-only gang cluster's head started")
        base = base_of(admin, ns, "h")
        assert base is not None and w.is_admitted(base)
        assert {ps["name"]: ps["count"] for ps in base["spec"]["podSets"]} == {"head": 1}
        refused = [e for e in admin.get(f"/api/v1/namespaces/{ns}/events")["items"]
                   if e.get("type") == "Warning" and "raykueue" in (e.get("message") or "")]
        assert not refused, [e["message"] for e in refused]
