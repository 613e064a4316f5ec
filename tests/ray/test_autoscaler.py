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

from tests.e2e.test_controller_e2e import RAYCLUSTERS, describe, settled
from tests.waiting import wait_for

from .conftest import FIGURES, RayCluster, raycluster
from .observe import observed

JOIN_TIMEOUT = 180


def replicas(admin, cluster: RayCluster) -> int:
    rc = admin.get(RAYCLUSTERS.path(cluster.namespace, cluster.name))
    return rc["spec"]["workerGroupSpecs"][0].get("replicas", 0)


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
