"""What `kubectl describe raycluster` shows of raykueue: Events on the RayCluster.

Real KubeRay, Kueue, kube-scheduler and kwok (the fixtures of
test_controller_e2e). A cluster short of quota gets a `WaitingForQuota` Event
naming the waiting pod, its LocalQueue and Kueue's words; once the quota is
raised, an `Admitted` Event naming that pod and only pods that waited. A cluster
whose workers Kueue preempts gets a `Preempted` Warning naming a preempted pod
and Kueue's reason. `QuotaInvariants` watches the whole of the first scenario;
not the second, where a preempted pod runs on its evicted Workload for the
moment its deletion takes, which its check 4 would flag (as in
test_controller_e2e's preemption test).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from raykueue.controller import cluster_status as cs
from raykueue.controller import workload as w
from raykueue.core.clock import timestamp
from raykueue.kube.resources import EVENTS_V1
from raykueue.kube.rest import Rest
from testkit.e2e.controller import (  # noqa: F401 - fixtures
    CQS,
    KUEUE,
    RAYCLUSTERS,
    WORKLOADS,
    WPCS,
    admin,
    controller,
    describe,
    queue,
    raycluster,
    settled,
    webhooks,
)
from testkit.pods import gated, role, running
from testkit.quota_invariants import QuotaInvariants
from testkit.waiting import wait_for


def cluster_events(api: Rest, ns: str, cluster: str, reason: str) -> list[dict[str, Any]]:
    """Events regarding the RayCluster with this reason, oldest first."""
    items = api.get(EVENTS_V1.path(ns))["items"]
    found = [e for e in items if e.get("reason") == reason
             and (e.get("regarding") or {}).get("kind") == "RayCluster"
             and (e.get("regarding") or {}).get("name") == cluster]
    return sorted(found, key=lambda e: e.get("eventTime") or "")


def event_naming(api: Rest, ns: str, cluster: str, reason: str, *words: str
                 ) -> Callable[[], dict[str, Any] | None]:
    def find() -> dict[str, Any] | None:
        return next((e for e in cluster_events(api, ns, cluster, reason)
                     if all(x in e["note"] for x in words)), None)
    return find


def set_quota(api: Rest, ns: str, cpu: str, memory: str) -> None:
    name = f"e2e-{ns}"
    cq = api.get(CQS.path(None, name))
    groups = cq["spec"]["resourceGroups"]
    groups[0]["flavors"][0]["resources"] = [{"name": "cpu", "nominalQuota": cpu},
                                            {"name": "memory", "nominalQuota": memory}]
    api.merge_patch(CQS.path(None, name), {"spec": {"resourceGroups": groups}})


def test_waiting_for_quota_then_admitted_on_the_raycluster(
        admin, kubectl, controller, queue):  # noqa: F811
    ns = queue(cpu="2", memory="2Gi")  # the head and one worker of two
    with QuotaInvariants(admin, [ns], quota_namespaces=[ns],
                         cluster_queues=[f"e2e-{ns}"]) as inv:
        admin.create(RAYCLUSTERS.path(ns), raycluster("rc", 2))
        rc_uid = admin.get(RAYCLUSTERS.path(ns, "rc"))["metadata"]["uid"]
        s = inv.wait(settled(admin, ns, "rc", 1, 1), timeout=120,
                     message=describe(admin, ns, "rc"))
        (waiting,) = [p["metadata"]["name"] for p in s["pods"] if gated(p)]

        # Kueue's words on the one Workload it cannot admit, said on the RayCluster.
        said = inv.wait(event_naming(admin, ns, "rc", cs.WAITING_FOR_QUOTA, waiting,
                                     "insufficient unused quota"), timeout=90,
                        message=lambda: f"WaitingForQuota naming {waiting} and Kueue's words: "
                        f"{[e['note'] for e in cluster_events(admin, ns, 'rc', cs.WAITING_FOR_QUOTA)]}")
        assert said["type"] == "Normal" and said["regarding"]["uid"] == rc_uid
        assert said["note"].startswith(f"1 pod waits for quota in LocalQueue team-a ({waiting}); "
                                       "Kueue: couldn't assign flavors"), said["note"]

        set_quota(admin, ns, cpu="3", memory="3Gi")
        after = inv.wait(settled(admin, ns, "rc", 2, 0), timeout=120,
                         message=describe(admin, ns, "rc"))
        admitted = inv.wait(event_naming(admin, ns, "rc", cs.ADMITTED, waiting), timeout=60,
                            message=lambda: f"Admitted naming {waiting}: "
                            f"{[e['note'] for e in cluster_events(admin, ns, 'rc', cs.ADMITTED)]}")
        assert admitted["type"] == "Normal" and admitted["regarding"]["uid"] == rc_uid
        assert admitted["note"].startswith(
            f"Kueue admitted 1 pod that waited for quota: {waiting} after "), admitted["note"]
        inv.sweep()

    # Where a Ray user looks: both in the Events table of `kubectl describe`.
    out = kubectl("describe", "raycluster", "rc", "-n", ns, check=True).stdout
    for reason in (cs.WAITING_FOR_QUOTA, cs.ADMITTED):
        assert any(line.split()[:2] == ["Normal", reason]
                   for line in out[out.index("Events:"):].splitlines()), out

    # Pods Kueue admitted at once (well inside the grace) are news to nobody.
    for pod in after["pods"]:
        name = pod["metadata"]["name"]
        (wl,) = after["owned"][pod["metadata"]["uid"]]
        took = timestamp(w.condition(wl, w.ADMITTED)["lastTransitionTime"]) - timestamp(
            wl["metadata"]["creationTimestamp"])
        if name != waiting and took < cs.WAITING_GRACE_SECONDS / 2:
            assert not any(name in e["note"] for e in cluster_events(admin, ns, "rc", cs.ADMITTED))
    # One Event per reason per minute at most, and the wait said again only if it changed.
    assert len(cluster_events(admin, ns, "rc", cs.WAITING_FOR_QUOTA)) <= 2
    assert all(running(p) for p in after["pods"])


def test_preempted_workers_are_named_on_the_raycluster(admin, controller, queue):  # noqa: F811
    ns = queue(cpu="3", memory="3Gi", preemption=True)  # the head and two workers
    admin.create(RAYCLUSTERS.path(ns), raycluster("rc", 2))
    before = wait_for(settled(admin, ns, "rc", 2, 0), timeout=120,
                      message=describe(admin, ns, "rc"))
    workers = {p["metadata"]["name"] for p in before["pods"] if role(p) == "worker"}

    # A more important Workload needing one worker's worth of quota.
    high = f"e2e-high-{ns}"
    admin.create(WPCS.path(), {"apiVersion": WPCS.api_version, "kind": "WorkloadPriorityClass",
                               "metadata": {"name": high}, "value": 5000})
    try:
        admin.create(WORKLOADS.path(ns), {
            "apiVersion": WORKLOADS.api_version, "kind": "Workload",
            "metadata": {"name": "urgent"},
            "spec": {"queueName": "team-a", "priority": 5000,
                     "priorityClassRef": {"group": KUEUE, "kind": "WorkloadPriorityClass",
                                          "name": high},
                     "podSets": [{"name": "main", "count": 1, "template": {"spec": {
                         "restartPolicy": "Never",
                         "containers": [{"name": "c", "image": "busybox", "resources": {
                             "requests": {"cpu": "1", "memory": "1Gi"}}}]}}}]}})

        def preempted() -> dict[str, Any] | None:
            for event in cluster_events(admin, ns, "rc", cs.PREEMPTED):
                if any(f"Workload of {x}: Preempted: " in event["note"] for x in workers):
                    return event
            return None

        event = wait_for(preempted, timeout=120, message=lambda: "a Preempted Event naming one "
                         f"of {sorted(workers)}: "
                         f"{[e['note'] for e in cluster_events(admin, ns, 'rc', cs.PREEMPTED)]}")
    finally:
        admin.delete(WPCS.path(None, high))
    assert event["type"] == "Warning"
    assert "Preempted to accommodate a workload" in event["note"], event["note"]
