"""`raykueue explain POD`: the text a user reads."""

from __future__ import annotations

from raykueue.controller import decide as d
from raykueue.controller.explain import explain, explain_pod, queue_position
from raykueue.core import contract as c
from testkit import controller_objects as o
from testkit.controller_world import World
from testkit.unit.controller_explain import CQ, LQ, facts


def test_pending_pod_shows_kueues_message_queue_priority_and_position():
    pod = o.pod()
    wl = o.workload(pod, "pending")
    ahead = o.workload(o.pod(), "pending", priority=500)
    text = explain(facts(pod, wl), CQ, LQ, queue_peers=[ahead, wl])
    assert f"gate:       {c.GATE} present" in text
    assert "insufficient unused quota for nvidia.com/gpu in flavor gpu-a100" in text
    assert "QuotaReserved=False (Pending)" in text
    assert f"LocalQueue team-a -> ClusterQueue {o.CQ}" in text
    assert "priority:   ray-worker (100)" in text
    assert "position:   2nd of 2 pending in LocalQueue team-a" in text
    assert "state:      Pending" in text


def test_worker_waiting_for_head_says_so():
    pod = o.pod()
    text = explain(facts(pod, context=d.Context(priority_values={"ray-worker": 100})), None, LQ)
    assert "Workload:   none" in text
    assert "head of Ray cluster raycluster-gpu not admitted yet" in text


def test_admitted_pod_shows_flavor_and_no_position():
    pod = o.pod(gated=False, phase="Running", ready=True)
    text = explain(facts(pod, o.workload(pod, "admitted", pods_ready="True")), CQ, LQ)
    assert f"Admitted to ClusterQueue {o.CQ}" in text
    assert "flavors:    gpu-a100" in text
    assert "position" not in text


def test_conflict_is_the_verdict():
    pod = o.pod()
    pod["spec"]["schedulingGates"].append({"name": c.KUEUE_POD_GATE})
    text = explain(facts(pod))
    assert "Kueue's pod integration manages it" in text


def test_kueues_own_workload_is_flagged():
    pod = o.pod()
    text = explain(facts(pod, o.workload(pod, "pending", ours=False)))
    assert "[not created by raykueue]" in text


def test_inactive_cluster_queue_is_shown():
    cq = {**CQ, "status": {**CQ["status"], "conditions": [{
        "type": "Active", "status": "False", "reason": "FlavorNotFound",
        "message": "Can't admit new workloads: references missing ResourceFlavor(s): x"}]}}
    pod = o.pod()
    text = explain(facts(pod, o.workload(pod, "pending")), cq, LQ)
    assert "inactive (FlavorNotFound)" in text


def test_queue_position_orders_by_priority_then_age():
    pod = o.pod()
    wl = o.workload(pod, "pending", priority=100)
    older = o.workload(o.pod(), "pending", priority=100)
    older["metadata"]["creationTimestamp"] = "2026-12-02T09:00:00Z"
    lower = o.workload(o.pod(), "pending", priority=10)
    admitted = o.workload(o.pod(), "admitted", priority=1000)
    assert queue_position(wl, [lower, older, admitted, wl]) == (2, 3)
    assert queue_position(admitted, [wl]) is None


def test_explain_pod_reads_what_it_needs():
    world = World()
    world.put("workloadpriorityclasses", o.priority_class("ray-head", 1000))
    world.put("workloadpriorityclasses", o.priority_class("ray-worker", 100))
    world.put("localqueues", LQ)
    world.put("clusterqueues", CQ)
    head = world.put("pods", o.pod(c.ROLE_HEAD, gated=False, phase="Running", ready=True))
    world.put("workloads", o.workload(head, "admitted", priority=1000))
    worker = world.put("pods", o.pod(c.ROLE_WORKER))
    world.put("workloads", o.workload(worker, "pending"))
    text = explain_pod(world, "team-a", worker["metadata"]["name"])  # type: ignore[arg-type]
    assert "insufficient unused quota" in text
    assert "1st of 1 pending" in text
    assert "ClusterQueue team-a-cq: 2 pending" in text
    assert world.writes() == []  # explain only reads


def test_explain_pod_for_a_missing_pod():
    assert explain_pod(World(), "team-a", "nope") == "pod team-a/nope not found"  # type: ignore[arg-type]


def test_kueues_own_position_and_setup_findings_are_shown_when_known():
    pod = o.pod()
    wl = o.workload(pod, "pending")
    entry = {"metadata": {"name": wl["metadata"]["name"]}, "positionInLocalQueue": 0,
             "positionInClusterQueue": 2}
    text = explain(facts(pod, wl), CQ, LQ, queue_peers=[wl], kueue_position=entry,
                   setup_notes=["WebhookOrder: kueue-... does not sort between ours"])
    assert "position:   1st in LocalQueue team-a, 3rd in its ClusterQueue (Kueue's visibility API)" in text
    assert "estimated" not in text
    assert text.endswith("  Kueue setup:\n    WebhookOrder: kueue-... does not sort between ours")
