"""`raykueue explain raycluster NAME` on the real API server: a RayCluster with a
head and three workers in each state a user asks about.

The controller runs in-process as raykueue's ServiceAccount (test_controller_api's
fixtures); Kueue's decisions are written as Kueue writes them (testkit.standins).
The eviction is written with the controller stopped, so the summary is read at
the moment a user would look: Kueue has evicted, raykueue has not yet acted.
"""

from __future__ import annotations

import contextlib

import orjson

from raykueue.controller import explain_cluster as ec
from raykueue.controller import pods as p
from raykueue.core import contract as c
from raykueue.kube.rest import ApiError
from testkit.api.controller import (  # noqa: F401 - fixtures
    admin,
    as_controller,
    ns,
    run_controller,
    scope,
)
from testkit.api.scope import ray_object
from testkit.standins import (
    LOCAL_QUEUE,
    admit,
    create_pod,
    evict,
    live,
    make_ready,
    ray_pod,
    workload_of,
)
from testkit.waiting import wait_for


def lifted(admin, pod) -> bool:  # noqa: F811 - admin is a Rest here
    found = live(admin, pod)
    return found is not None and not p.is_gated(found)


def test_explain_raycluster_summarises_running_waiting_and_evicted_workers(
        admin, ns, scope, run_controller) -> None:  # noqa: F811 - fixtures
    cluster = ray_object("RayCluster", "rc", annotations={c.QUEUE_ANNOTATION: LOCAL_QUEUE},
                         suspend=True)  # KubeRay, where it runs, makes no pods of its own
    admin.create(ec.RAYCLUSTERS.path(ns), cluster)
    head = create_pod(admin, ray_pod(ns, scope, "head", "rc-head"))
    up, evicted, waiting = (create_pod(admin, ray_pod(ns, scope, "worker", f"rc-worker-{x}"))
                            for x in ("up", "evicted", "waiting"))
    controller = run_controller()

    admit(admin, head, scope)
    wait_for(lambda: lifted(admin, head), timeout=30, message="the head's gate lifted")
    make_ready(admin, head)
    for worker in (up, evicted, waiting):
        wait_for(lambda w=worker: workload_of(admin, w), timeout=30, message="workers' Workloads")
    admit(admin, up, scope)
    admit(admin, evicted, scope)
    wait_for(lambda: lifted(admin, up) and lifted(admin, evicted), timeout=30,
             message="two workers' gates lifted")
    make_ready(admin, up)
    controller.stop()
    evict(admin, evicted, scope)

    summary = ec.explain_raycluster(admin, ns, "rc")
    assert summary["found"] and summary["queue"] == LOCAL_QUEUE
    assert summary["head"]["state"] == ec.RUNNING
    counts = {k: n for k, n in summary["workers"].items() if n}
    assert counts == {ec.RUNNING: 1, ec.EVICTED: 1, ec.WAITING_FOR_QUOTA: 1}, summary["pods"]
    by_name = {e["name"]: e for e in summary["pods"]}
    assert by_name["rc-worker-evicted"]["evicted"]["reason"] == "Preempted"
    assert "prioritization in the ClusterQueue" in by_name["rc-worker-evicted"]["evicted"]["message"]
    position = by_name["rc-worker-waiting"]["position"]
    # Kueue's controller is not running here: its visibility API has no entry,
    # so the place is the estimate (the only pending Workload in the queue).
    assert position["localQueue"] == 1
    assert by_name["rc-worker-waiting"]["workload"] == workload_of(admin, waiting)["metadata"]["name"]

    text = ec.render(summary)
    assert f"RayCluster {ns}/rc\n" in text
    assert "workers:    1 running, 1 waiting for quota, 1 evicted" in text
    assert "rc-worker-evicted: evicted by Kueue (Preempted)" in text
    assert "rc-worker-waiting: waiting for quota, 1st in its LocalQueue" in text
    orjson.dumps(summary)

    missing = ec.explain_raycluster(admin, ns, "nope")
    assert not missing["found"] and missing["pods"] == []
    with contextlib.suppress(ApiError):
        admin.delete(ec.RAYCLUSTERS.path(ns, "rc"))
