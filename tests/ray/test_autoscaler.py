"""The real Ray autoscaler (v2) drives raykueue: scenarios judged through the API and Ray.

Ray demand makes the autoscaler patch the RayCluster; KubeRay creates pods;
raykueue gates them and Kueue admits what the quota holds; kwok runs the
admitted ones and the Ray tier starts a Ray worker for each, which joins the
head. Tasks wait on a file the test creates, so demand lasts as long as a
scenario needs it.
"""

from __future__ import annotations

import time
from pathlib import Path

from raykueue.webhooks.autoscaler_env import (
    ALLOCATE_TIMEOUT_ENV,
    DEFAULT_ALLOCATE_TIMEOUT_SECONDS,
)
from testkit.e2e.controller import by_pod, describe, settled
from testkit.ray.autoscaler import JOIN_TIMEOUT, replicas
from testkit.ray.figures import FIGURES
from testkit.raycluster import RayCluster, observed, raycluster
from testkit.waiting import wait_for

# Long enough for an admitted worker to join before the autoscaler gives up on it
# (slow on a busy machine), short enough to see two cycles within the tier's budget.
SHORT_ALLOCATE_TIMEOUT_S = 60
IDLE_SECONDS = 10  # autoscalerOptions.idleTimeoutSeconds of a cluster that should shrink soon


def wait_joined(admin, cluster: RayCluster, running: int, gated: int) -> dict:
    """Pods settled (`running` admitted, `gated` waiting, one Workload each) and exactly
    the running worker pods alive in Ray."""
    def check() -> dict | None:
        state = settled(admin, cluster.namespace, cluster.name, running, gated)()
        if state is None:
            return None
        pods = {p["metadata"]["name"] for p in state["pods"]
                if p["metadata"]["labels"].get("ray.io/node-type") == "worker"
                and p["status"].get("phase") == "Running"}
        return state if cluster.joined_workers() == pods else None

    return wait_for(check, timeout=JOIN_TIMEOUT, interval=0.5,
                    message=lambda: f"{running} joined, {gated} gated; Ray has "
                                    f"{sorted(cluster.joined_workers())}; pods: "
                                    f"{describe(admin, cluster.namespace, cluster.name)()}")


def test_demand_beyond_quota(admin, controller, queue, ray_cluster, tmp_path: Path):
    ns = queue(cpu="5", memory="100Gi")  # the head and 4 workers
    cluster = ray_cluster(ns, raycluster("rc"))
    hold = tmp_path / "release"
    with observed(admin, ns) as seen:
        t0 = time.monotonic()
        cluster.ask({"op": "submit", "count": 6, "cpus": 1, "hold": str(hold)})
        wait_for(lambda: replicas(admin, cluster) == 6, timeout=60,
                 message=lambda: f"the autoscaler to ask for 6 workers (replicas {replicas(admin, cluster)})")
        wait_joined(admin, cluster, running=4, gated=2)
        joined_after = time.monotonic() - t0
        joined = cluster.joined_workers()
        hold.touch()
        results = cluster.ask({"op": "results", "timeout": 120})["results"]
    assert len(results) == 6
    assert set(results) <= joined  # every task ran on one of the 4 admitted workers
    assert seen.max_workers_running == 4  # never more than the quota, at any moment
    assert not cluster.runner.tier.watched.off_loopback, cluster.runner.tier.watched.off_loopback
    FIGURES["demand_to_4_joined_s"] = round(joined_after, 1)


def gated_pods_recycled(seen) -> int:
    """Worker pods deleted without ever having run: the autoscaler giving up on them."""
    return len(seen.deleted["worker"] - seen.ran)


def no_orphans(admin, ns: str) -> bool:
    """No live Workload without its pod, no managed pod without a Workload."""
    pods = [p for p in admin.get(f"/api/v1/namespaces/{ns}/pods")["items"]
            if not p["metadata"].get("deletionTimestamp")]
    owned = by_pod(admin, ns)
    return set(owned) <= {p["metadata"]["uid"] for p in pods} and all(
        len(owned.get(p["metadata"]["uid"], [])) == 1 for p in pods)


def test_waiting_past_the_allocate_timeout(admin, controller, queue, ray_cluster, tmp_path: Path):
    """Two clusters side by side, each with quota for 2 of the 4 workers its tasks need.

    `as_things_stand` sets the autoscaler's allocate timeout short, standing in for
    Ray's 3600 s; `mitigated` gets raykueue's value instead. Both are watched over
    the same window, which ends once the first has recycled each waiting pod twice.
    """
    short = {ALLOCATE_TIMEOUT_ENV: str(SHORT_ALLOCATE_TIMEOUT_S)}
    before_body = raycluster("before", autoscaler_env=short)
    after_body = raycluster("after")  # raykueue's first webhook sets the timeout
    clusters = {}
    for body in (before_body, after_body):
        ns = queue(cpu="3", memory="100Gi")  # the head and 2 workers
        clusters[body["metadata"]["name"]] = ray_cluster(ns, body)
    before, after = clusters["before"], clusters["after"]
    wanted = {"before": str(SHORT_ALLOCATE_TIMEOUT_S), "after": str(DEFAULT_ALLOCATE_TIMEOUT_SECONDS)}
    for name, want in wanted.items():
        cluster = clusters[name]
        stored = admin.get(f"/apis/ray.io/v1/namespaces/{cluster.namespace}/rayclusters/{name}")
        env = {e["name"]: e.get("value") for e in stored["spec"]["autoscalerOptions"]["env"]}
        assert env[ALLOCATE_TIMEOUT_ENV] == want  # the user's value wins; raykueue's otherwise
    hold = tmp_path / "release"
    with observed(admin, before.namespace) as seen_before, observed(admin, after.namespace) as seen_after:
        for cluster in (before, after):
            cluster.ask({"op": "submit", "count": 4, "cpus": 1, "hold": str(hold)})
        wait_joined(admin, after, running=2, gated=2)
        # The window ends once `before` has given up on both waiting pods at least
        # once. On a busy machine it may give up on admitted workers that were slow
        # to join as well: that is churn from the same timeout, and counted.
        wait_for(lambda: before.runner.tier.check() or gated_pods_recycled(seen_before) >= 2,
                 timeout=6 * SHORT_ALLOCATE_TIMEOUT_S, interval=1,
                 message=lambda: f"the waiting pods recycled: {seen_before.churn()}")
        assert gated_pods_recycled(seen_after) == 0  # over the same window
        wait_joined(admin, after, running=2, gated=2)
        for cluster in (before, after):
            wait_for(lambda ns=cluster.namespace: no_orphans(admin, ns), timeout=30,
                     message=f"no Workload without its pod in {cluster.namespace}")
        hold.touch()
        results = after.ask({"op": "results", "timeout": 180})["results"]
        assert len(results) == 4 and set(results) <= after.joined_workers()
    assert seen_after.max_workers_running == 2
    assert seen_before.max_workers_running <= 2
    assert seen_after.churn()["worker_pods_created"] == 4  # the 2 running, the 2 waiting: no more
    assert seen_after.churn()["workloads_deleted"] == 0
    assert not before.runner.tier.watched.off_loopback, before.runner.tier.watched.off_loopback
    FIGURES["allocate_timeout_s"] = SHORT_ALLOCATE_TIMEOUT_S
    FIGURES["churn_before"] = seen_before.churn()
    FIGURES["churn_after"] = seen_after.churn()


def test_idle_scale_down_frees_quota_for_another_cluster(admin, controller, queue, ray_cluster,
                                                          tmp_path: Path):
    ns = queue(cpu="4", memory="100Gi")  # two heads and 2 workers between them
    first = ray_cluster(ns, raycluster("first", idle_seconds=IDLE_SECONDS))
    hold_first, hold_second = tmp_path / "first", tmp_path / "second"
    with observed(admin, ns) as seen:
        first.ask({"op": "submit", "count": 2, "cpus": 1, "hold": str(hold_first)})
        wait_joined(admin, first, running=2, gated=0)
        second = ray_cluster(ns, raycluster("second"))
        second.ask({"op": "submit", "count": 2, "cpus": 1, "hold": str(hold_second)})
        wait_joined(admin, second, running=0, gated=2)

        hold_first.touch()
        assert len(first.ask({"op": "results", "timeout": 120})["results"]) == 2
        idle = time.monotonic()  # from here the first cluster's workers have nothing to do

        def first_workers_gone() -> bool:  # pods and their Workloads, only the head's left
            return settled(admin, ns, first.name, 0, 0)() is not None and no_orphans(admin, ns)
        wait_for(first_workers_gone, timeout=IDLE_SECONDS + 120, interval=0.5,
                 message=describe(admin, ns, first.name))
        freed = time.monotonic()
        wait_for(settled(admin, ns, second.name, 2, 0), timeout=120, interval=0.5,
                 message=describe(admin, ns, second.name))
        admitted = time.monotonic()
        wait_joined(admin, second, running=2, gated=0)
        joined = time.monotonic()
        hold_second.touch()
        results = second.ask({"op": "results", "timeout": 120})["results"]
    assert len(results) == 2 and set(results) <= second.joined_workers()
    assert seen.max_workers_running == 2  # the quota, across both clusters, at every moment
    assert not first.runner.tier.watched.off_loopback, first.runner.tier.watched.off_loopback
    FIGURES["idle_timeout_s"] = IDLE_SECONDS
    FIGURES["idle_to_quota_freed_s"] = round(freed - idle, 1)
    FIGURES["idle_to_other_admitted_s"] = round(admitted - idle, 1)
    FIGURES["idle_to_other_joined_s"] = round(joined - idle, 1)
