"""A gang cluster's pass: the rule of controller/gang/rule.py turned into actions."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from raykueue.controller import actions as a
from raykueue.controller import decide as d
from raykueue.controller import workload as w
from raykueue.controller.gang import base as gb
from raykueue.controller.gang import decide as gd
from raykueue.core import contract as c
from testkit import controller_objects as o
from testkit.unit.controller_gang_decide import CTX, GROUP, base_for, cluster, gang_pod, kinds


def stopped(pod: dict[str, Any]) -> dict[str, Any]:
    """What the kubelet reports once every container has ended."""
    pod["status"]["containerStatuses"] = [{"name": x["name"], "state": {"terminated": {}}}
                                          for x in pod["spec"]["containers"]]
    return pod


def test_no_base_until_every_base_pod_exists() -> None:
    steps, plan = gd.decide_gang(cluster(1), {}, None, CTX)
    assert [type(x) for _, x in steps] == [a.Wait]
    assert "1 of group gpu-group missing" in plan.waiting


def test_the_base_is_one_workload_owned_by_the_raycluster_with_a_podset_per_group() -> None:
    pods = cluster(2)
    steps, _ = gd.decide_gang(pods, {}, None, CTX)
    ((target, create),) = steps
    assert target is None and isinstance(create, a.CreateWorkload)
    body = create.body
    assert [(ps["name"], ps["count"]) for ps in body["spec"]["podSets"]] == [("head", 1), (GROUP, 2)]
    (ref,) = body["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["controller"]) == ("RayCluster", "raycluster-gpu", False)
    assert body["metadata"]["name"] == gb.base_name("raycluster-gpu", ref["uid"])
    assert body["spec"]["priority"] == 1000 and body["spec"]["queueName"] == "team-a"
    assert gb.is_base(body) and w.is_ours(body)


def test_pods_wait_for_the_base_while_it_is_pending_and_per_pod_decide_never_creates() -> None:
    pods = cluster(3)
    steps, _ = gd.decide_gang(pods, {}, base_for(pods, "pending"), CTX)
    assert kinds(steps) == [(None, "Wait")]
    (wait,) = d.decide(pods[1], [], d.Context(head_admitted=True))
    assert isinstance(wait, a.Wait) and "gang" in wait.reason


def test_an_admitted_base_releases_its_pods_together_and_extras_get_their_own() -> None:
    pods = cluster(3)
    steps, _ = gd.decide_gang(pods, {}, base_for(pods, "admitted"), CTX)
    lifts = [(name, x) for name, x in steps if isinstance(x, a.LiftGate)]
    assert [name for name, _ in lifts] == [p["metadata"]["name"] for p in pods[:3]]
    assert all(x.node_selector == {"pool": "gpu"} for _, x in lifts)
    (create,) = [(name, x) for name, x in steps if isinstance(x, a.CreateWorkload)]
    assert create[0] == pods[3]["metadata"]["name"]
    assert create[1].body["metadata"]["name"] == w.workload_name(pods[3])


def test_a_vacancy_is_filled_by_an_extra_or_handed_back() -> None:
    pods = cluster(3, gated=False, phase="Running", ready=True)
    base = base_for(pods, "admitted")
    base["status"]["conditions"].append({"type": w.PODS_READY, "status": "True"})
    extra_wl = o.workload(pods[3], "admitted")
    pods[1]["metadata"]["deletionTimestamp"] = o.T2
    steps, _ = gd.decide_gang(pods, {pods[3]["metadata"]["uid"]: extra_wl}, base, CTX)
    assert kinds(steps) == [(pods[3]["metadata"]["name"], "DeleteWorkload")]
    # Without the extra the slot goes back to Kueue.
    steps, _ = gd.decide_gang(pods[:3], {}, base, CTX)
    (reclaim,) = [x for _, x in steps if isinstance(x, a.SetReclaimable)]
    assert reclaim.counts == {GROUP: 1}


def test_the_head_gone_requeues_the_base_whole() -> None:
    pods = cluster(2, gated=False, phase="Running", ready=True)
    base = base_for(pods, "admitted")
    steps, _ = gd.decide_gang(pods[1:], {}, base, CTX)
    # The base holds its quota while its pods still run (the evictions are only
    # proposals the handler confirms live); it goes once they have stopped.
    assert kinds(steps) == [(pods[1]["metadata"]["name"], "EvictPod"),
                            (pods[2]["metadata"]["name"], "EvictPod"), (None, "Wait")]
    gone = [stopped(x) for x in copy.deepcopy(pods[1:])]
    for x in gone:
        x["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    steps, _ = gd.decide_gang(gone, {}, base, CTX)
    assert kinds(steps) == [(None, "DeleteWorkload")]


def test_the_head_gone_with_its_raycluster_only_deletes_the_base() -> None:
    """Deleting a RayCluster takes its pods along; evicting them first would be writes for nothing."""
    pods = cluster(2, gated=False, phase="Running", ready=True)
    base = base_for(pods, "admitted")
    gone = dataclasses.replace(CTX, cluster_gone=True)
    # Not while they still run; then at once.
    assert kinds(gd.decide_gang(pods[1:], {}, base, gone)[0]) == [(None, "Wait")]
    steps, _ = gd.decide_gang([stopped(x) for x in copy.deepcopy(pods[1:])], {}, base, gone)
    assert kinds(steps) == [(None, "DeleteWorkload")]


def test_an_evicted_base_is_requeued_whole() -> None:
    pods = cluster(2, gated=False, phase="Running", ready=True)
    steps, _ = gd.decide_gang(pods, {}, base_for(pods, "evicted"), CTX)
    # The base goes once its pods have stopped, not in the same pass.
    assert [t for _, t in kinds(steps)] == ["EvictPod"] * 3 + ["Wait"]
    assert [x.head for _, x in steps if isinstance(x, a.EvictPod)] == [True, False, False]


def test_base_pods_ready_sets_podsready_once() -> None:
    pods = cluster(2, gated=False, phase="Running", ready=True)
    base = base_for(pods, "admitted")
    steps, _ = gd.decide_gang(pods, {}, base, CTX)
    assert [type(x) for _, x in steps] == [a.SetPodsReady]
    base["status"]["conditions"].append({"type": w.PODS_READY, "status": "True"})
    assert gd.decide_gang(pods, {}, base, CTX)[0] == []


def test_explain_names_the_gang_the_pods_place_and_what_it_waits_for() -> None:
    from raykueue.controller.explain import explain_pod
    from testkit.controller_world import World
    world = World()
    world.put("workloadpriorityclasses", o.priority_class("ray-head", 1000))
    pods = [world.put("pods", x) for x in cluster(1)]
    text = explain_pod(world, "team-a", pods[1]["metadata"]["name"])  # type: ignore[arg-type]
    assert "gang raycluster-gpu: in the base (podSet gpu-group)" in text
    assert "1 of group gpu-group missing" in text
    base = world.put("workloads", base_for(cluster(2), "pending"))
    extra = world.put("pods", gang_pod(c.ROLE_WORKER, 9))
    world.put("pods", gang_pod(c.ROLE_WORKER, 8))
    text = explain_pod(world, "team-a", extra["metadata"]["name"])  # type: ignore[arg-type]
    assert "an extra" in text and "waiting for Kueue to admit the base" in text
    assert base["metadata"]["name"] in text


# --- a base slot is filled once ------------------------------------------------------


def running_cluster(workers: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Head and `workers` workers past the gate (the first two the base), the base admitted."""
    pods = cluster(workers, gated=False, phase="Running", ready=True)
    base = base_for(pods, "admitted")
    base["status"]["conditions"].append({"type": w.PODS_READY, "status": "True"})
    return pods, base


def test_a_newcomer_of_the_base_pods_second_never_takes_a_released_pods_slot() -> None:
    """The CI failure's read, through decide_gang: a pod created in the base pods'
    second whose uid sorts first was released under the base while both base workers
    ran; now it queues for a Workload of its own."""
    pods, base = running_cluster(2)
    newcomer = gang_pod(c.ROLE_WORKER, 1, uid="00000000-0000-4000-8000-000000000000")
    for x in [*pods, newcomer]:
        x["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    steps, plan = gd.decide_gang([*pods, newcomer], {}, base, CTX)
    assert kinds(steps) == [(newcomer["metadata"]["name"], "CreateWorkload")]
    assert plan.extras == (newcomer["metadata"]["uid"],)


def test_a_base_pod_missing_from_the_snapshot_keeps_its_slot_from_what_was_released() -> None:
    pods, base = running_cluster(2)
    newcomer = gang_pod(c.ROLE_WORKER, 9)
    snapshot = [pods[0], pods[1], newcomer]  # pods[2] released, not in this snapshot
    steps, _ = gd.decide_gang(snapshot, {}, base, CTX)
    assert (newcomer["metadata"]["name"], "LiftGate") in kinds(steps)  # one snapshot alone
    released = {x["metadata"]["uid"]: gb.group_of(x) for x in pods}
    steps, _ = gd.decide_gang(snapshot, {}, base, dataclasses.replace(CTX, released=released))
    assert kinds(steps) == [(newcomer["metadata"]["name"], "CreateWorkload")]


def test_a_pod_the_controller_lifted_counts_as_released_though_the_cache_shows_its_gate() -> None:
    pods, base = running_cluster(2)
    stale = copy.deepcopy(pods[2])
    stale["spec"]["schedulingGates"] = [{"name": c.GATE}]
    newcomer = gang_pod(c.ROLE_WORKER, 9)
    released = {x["metadata"]["uid"]: gb.group_of(x) for x in pods}
    steps, _ = gd.decide_gang([pods[0], pods[1], stale, newcomer], {}, base,
                              dataclasses.replace(CTX, released=released))
    assert kinds(steps) == [(newcomer["metadata"]["name"], "CreateWorkload")]


def test_a_released_pod_no_workload_covers_is_evicted_never_skipped() -> None:
    pods, base = running_cluster(2)
    intruder = gang_pod(c.ROLE_WORKER, 9, gated=False, phase="Running", ready=True)
    steps, plan = gd.decide_gang([*pods, intruder], {}, base, CTX)
    assert kinds(steps) == [(intruder["metadata"]["name"], "EvictPod")]
    (evict,) = [x for _, x in steps]
    assert isinstance(evict, a.EvictPod) and evict.reason == a.GANG_UNCOVERED
    assert evict.workload == "" and not evict.head and "no slot left" in evict.message
    assert plan.uncovered == (intruder["metadata"]["uid"],)


def test_released_pods_with_no_base_at_all_are_evicted() -> None:
    pods, _ = running_cluster(2)  # the base deleted by hand
    steps, _ = gd.decide_gang(pods, {}, None, CTX)
    assert kinds(steps)[:3] == [(x["metadata"]["name"], "EvictPod") for x in pods]
    assert [x.head for _, x in steps if isinstance(x, a.EvictPod)] == [True, False, False]


def test_an_extra_kueue_evicted_is_left_to_its_own_pass_not_counted_in_the_base() -> None:
    pods, base = running_cluster(3)
    own = {pods[3]["metadata"]["uid"]: o.workload(pods[3], "evicted")}
    for x in pods:  # one second: the leaving extra may sort before the base workers
        x["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    steps, plan = gd.decide_gang(pods, own, base, CTX)
    assert steps == [] and plan.uncovered == ()
    own = {pods[3]["metadata"]["uid"]: o.workload(pods[3], "finished")}
    assert gd.decide_gang(pods, own, base, CTX)[0] == []


# --- minReplicas changed on a running gang --------------------------------------------


def test_min_lowered_moves_the_newest_base_worker_out_then_hands_its_slot_back() -> None:
    pods, base = running_cluster(2)
    lowered = dataclasses.replace(CTX, min_replicas={GROUP: 1})
    steps, _ = gd.decide_gang(pods, {}, base, lowered)
    assert kinds(steps) == [(pods[2]["metadata"]["name"], "CreateWorkload")]
    own = {pods[2]["metadata"]["uid"]: o.workload(pods[2], "pending")}
    assert gd.decide_gang(pods, own, base, lowered)[0] == []  # the base covers it meanwhile
    (wait,) = d.decide(pods[2], list(own.values()), d.Context())
    assert isinstance(wait, a.Wait)  # no "running without admission" warning
    own = {pods[2]["metadata"]["uid"]: o.workload(pods[2], "admitted")}
    steps, _ = gd.decide_gang(pods, own, base, lowered)
    assert [(t, x.counts) for t, x in steps if isinstance(x, a.SetReclaimable)] == [
        (None, {GROUP: 1})]


def test_min_raised_on_a_running_base_makes_the_new_workers_extras() -> None:
    pods, base = running_cluster(2)
    newcomer = gang_pod(c.ROLE_WORKER, 9)
    steps, _ = gd.decide_gang([*pods, newcomer], {}, base,
                              dataclasses.replace(CTX, min_replicas={GROUP: 3}))
    assert kinds(steps) == [(newcomer["metadata"]["name"], "CreateWorkload")]


def test_min_changed_while_the_base_is_pending_makes_it_again_with_the_new_counts() -> None:
    pods = cluster(3)
    base = base_for(pods, "pending")
    raised = dataclasses.replace(CTX, min_replicas={GROUP: 3})
    steps, _ = gd.decide_gang(pods, {}, base, raised)
    ((target, delete),) = steps
    assert target is None and isinstance(delete, a.DeleteWorkload)
    assert delete.reason == a.GANG_REMADE and "gpu-group x3" in delete.message
    steps, _ = gd.decide_gang(pods, {}, None, raised)
    (create,) = [x for _, x in steps if isinstance(x, a.CreateWorkload)]
    assert [(ps["name"], ps["count"]) for ps in create.body["spec"]["podSets"]] == [
        ("head", 1), (GROUP, 3)]


def test_a_preempted_base_takes_its_extras_along() -> None:
    """Kueue adds back what its preemptor does not need: taking the base, it may leave an
    extra it took first admitted. The extra goes with its base all the same."""
    pods = cluster(3, gated=False, phase="Running", ready=True)
    own = {pods[3]["metadata"]["uid"]: o.workload(pods[3], "admitted")}
    steps, _ = gd.decide_gang(pods, own, base_for(pods, "evicted"), CTX)
    # Proposed for every pod; the handler deletes only the base pods (the extra's own
    # Workload is not Kueue's eviction: it is reported). The base waits for them to stop.
    assert kinds(steps) == [(x["metadata"]["name"], "EvictPod") for x in pods] + [
        (None, "Wait")]


def test_the_raycluster_cache_keeps_what_the_base_follows() -> None:
    from raykueue.core.rayobjects import group_minimums, slim_raycluster, workers_to_delete
    raycluster = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
                  "metadata": {"name": "rc", "namespace": "team-a", "uid": "u1",
                               "managedFields": [{"manager": "x"}]},
                  "spec": {"headGroupSpec": {"template": {"spec": {"containers": []}}},
                           "workerGroupSpecs": [
                               {"groupName": "tpu", "minReplicas": 2, "numOfHosts": 4,
                                "replicas": 2, "template": {"spec": {"containers": []}},
                                "scaleStrategy": {"workersToDelete": ["rc-tpu-x"]}},
                               {"groupName": "cpu", "replicas": 1}]}}
    slim = slim_raycluster(raycluster)
    assert "headGroupSpec" not in slim["spec"] and "managedFields" not in slim["metadata"]
    assert group_minimums(slim) == group_minimums(raycluster) == {"tpu": 8, "cpu": 0}
    assert workers_to_delete(slim) == workers_to_delete(raycluster) == {"rc-tpu-x"}


def test_released_pods_of_a_raycluster_being_deleted_are_left_to_the_garbage_collector() -> None:
    """The collector may take the base (owned by the RayCluster) before the pods show their
    deletion: they are not evicted as uncovered, they go with their cluster."""
    pods, _ = running_cluster(2)
    steps, _ = gd.decide_gang(pods, {}, None, dataclasses.replace(CTX, cluster_gone=True))
    assert kinds(steps) == [(None, "Wait")]
