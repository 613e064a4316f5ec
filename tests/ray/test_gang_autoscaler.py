"""A gang cluster (docs/GANG.md) under the real autoscaler: the base whole, then extras by demand.

The cluster starts at `minReplicas`: the head and those workers are the base,
admitted as one Workload and released together. Tasks then need more workers
than the base has; the autoscaler raises `replicas`, and each pod beyond the
base is an extra with a Workload of its own, made only once the base is
admitted. Judged through the API (the base's podSets, the extras' Workloads,
`GangWatch` over the whole scenario: no pod runs without an admitted Workload
covering it) and through Ray (the workers that joined, where the tasks ran).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from raykueue.controller import workload as w
from raykueue.core import contract as c
from testkit.e2e.controller import describe, state
from testkit.e2e.gang import GangWatch, base_of
from testkit.pods import role, running
from testkit.ray.autoscaler import JOIN_TIMEOUT, replicas
from testkit.ray.figures import FIGURES
from testkit.raycluster import RayCluster, observed, raycluster
from testkit.waiting import wait_for

BASE_WORKERS = 1
WORKERS = 2  # what the tasks need: the base's worker and an extra


def gang_joined(admin, cluster: RayCluster, workers: int, extras: int) -> dict[str, Any] | None:
    """`workers` worker pods running, none gated, `extras` of them with a Workload of their own,
    the rest (the base's) none; exactly the running workers alive in Ray."""
    s = state(admin, cluster.namespace, cluster.name)
    worker_pods = [p for p in s["pods"] if role(p) == c.ROLE_WORKER]
    own = [p for p in worker_pods if s["owned"].get(p["metadata"]["uid"])]
    ok = (s["head_running"] and s["workers_running"] == workers and s["workers_gated"] == 0
          and len(own) == extras and all(len(s["owned"][p["metadata"]["uid"]]) == 1 for p in own))
    if not ok:
        return None
    names = {p["metadata"]["name"] for p in worker_pods if running(p)}
    return {**s, "extras": own} if cluster.joined_workers() == names else None


def test_a_gang_cluster_grows_from_its_base_by_task_demand(admin, controller, queue, ray_cluster,
                                                           tmp_path: Path):
    ns = queue(cpu=str(1 + WORKERS), memory="100Gi")
    body = raycluster("gang", min_workers=BASE_WORKERS)
    body["metadata"]["annotations"][c.GANG_ANNOTATION] = "true"
    hold = tmp_path / "release"
    with GangWatch(admin, ns) as gang, observed(admin, ns) as seen:
        cluster = ray_cluster(ns, body)
        wait_for(lambda: gang_joined(admin, cluster, BASE_WORKERS, 0), timeout=JOIN_TIMEOUT, interval=0.5,
                 message=describe(admin, ns, cluster.name))
        base = base_of(admin, ns, cluster.name)
        assert base is not None and w.is_admitted(base)
        assert {ps["name"]: ps["count"] for ps in base["spec"]["podSets"]} == {"head": 1, "cpu": BASE_WORKERS}
        base_admitted = w.condition(base, w.ADMITTED)["lastTransitionTime"]

        t0 = time.monotonic()
        cluster.ask({"op": "submit", "count": WORKERS, "cpus": 1, "hold": str(hold)})
        wait_for(lambda: replicas(admin, cluster) == WORKERS, timeout=60,
                 message=lambda: f"the autoscaler to ask for {WORKERS} workers "
                                 f"(replicas {replicas(admin, cluster)})")
        grown = wait_for(lambda: gang_joined(admin, cluster, WORKERS, WORKERS - BASE_WORKERS),
                         timeout=JOIN_TIMEOUT, interval=0.5, message=describe(admin, ns, cluster.name))
        extras_joined = time.monotonic() - t0
        joined = cluster.joined_workers()
        hold.touch()
        results = cluster.ask({"op": "results", "timeout": 120})["results"]
        after = base_of(admin, ns, cluster.name)
        assert after is not None and after["metadata"]["uid"] == base["metadata"]["uid"]  # never requeued
    gang.assert_held()
    for pod in grown["extras"]:
        (own,) = grown["owned"][pod["metadata"]["uid"]]
        assert own["metadata"]["creationTimestamp"] >= base_admitted  # extras only after the base
    assert len(set(results)) == WORKERS and set(results) <= joined  # one task per worker, all in Ray
    assert seen.max_workers_running == WORKERS
    assert not cluster.runner.tier.watched.off_loopback, cluster.runner.tier.watched.off_loopback
    FIGURES["gang_demand_to_extras_joined_s"] = round(extras_joined, 1)
