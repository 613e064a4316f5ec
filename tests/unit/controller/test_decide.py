"""Every rule of `decide`, on objects shaped like the real ones."""

from __future__ import annotations

import copy

import pytest

from raykueue.controller import actions as a
from raykueue.controller import decide as d
from raykueue.controller import workload as w
from raykueue.controller import workload_match as wm
from raykueue.controller import workload_status as ws
from raykueue.core import contract as c
from testkit import controller_objects as o
from testkit.unit.controller_decide import PRIORITIES, ctx


def only(actions, kind):
    found = [x for x in actions if isinstance(x, kind)]
    assert len(found) == 1, actions
    return found[0]


# --- 1. one Workload per gated pod --------------------------------------------------


def test_gated_head_gets_a_workload_with_resolved_priority():
    head = o.pod(c.ROLE_HEAD)
    (action,) = d.decide(head, [], ctx(head_admitted=False))
    assert isinstance(action, a.CreateWorkload)
    assert action.role == c.ROLE_HEAD
    assert action.body == w.build_workload(head, w.Priority("ray-head", 1000), w.V1BETA2)


def test_v1beta1_server_gets_a_v1beta1_workload():
    head = o.pod(c.ROLE_HEAD)
    (action,) = d.decide(head, [], ctx(version=w.V1BETA1))
    assert action.body["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    assert action.body["spec"]["priorityClassName"] == "ray-head"


def test_existing_workload_is_adopted_not_recreated():
    pod = o.pod()
    actions = d.decide(pod, [o.workload(pod, "pending")], ctx())
    assert not [x for x in actions if isinstance(x, a.CreateWorkload)]
    assert isinstance(actions[0], a.Wait)
    assert "insufficient unused quota for nvidia.com/gpu" in actions[0].reason


def test_missing_priority_class_waits_and_warns():
    pod = o.pod(priority="nonexistent")
    actions = d.decide(pod, [], ctx())
    warn = only(actions, a.Warn)
    assert warn.reason == a.WARN_PRIORITY_CLASS
    assert "nonexistent" in warn.message
    assert not [x for x in actions if isinstance(x, a.CreateWorkload)]


def test_pod_without_priority_label_gets_no_priority():
    pod = o.pod()
    del pod["metadata"]["labels"][c.PRIORITY_CLASS_LABEL]
    action = only(d.decide(pod, [], ctx()), a.CreateWorkload)
    assert "priority" not in action.body["spec"]


def test_pod_without_queue_waits_and_warns():
    pod = o.pod(queue=None)
    actions = d.decide(pod, [], ctx())
    assert only(actions, a.Warn).reason == a.WARN_NO_QUEUE
    assert not [x for x in actions if isinstance(x, a.CreateWorkload)]


def adopted(role: str) -> dict:
    """A running pod as controller/adopt.py leaves it: our label, the queue and
    priority class as annotations (Kueue refuses those labels on a running pod)."""
    pod = o.pod(role, gated=False, phase="Running", ready=True, queue=None)
    cls = pod["metadata"]["labels"].pop(c.PRIORITY_CLASS_LABEL)
    pod["metadata"].setdefault("annotations", {}).update(
        {c.QUEUE_ANNOTATION: "team-a", c.PRIORITY_CLASS_ANNOTATION: cls})
    return pod


@pytest.mark.parametrize("role", [c.ROLE_WORKER, c.ROLE_HEAD])
def test_a_running_pod_of_ours_without_a_workload_gets_one_never_a_delete(role):
    """Issue 28: adopted (or its Workload deleted), a running pod gets a Workload of
    its own in its queue with its role's priority; nothing deletes it on this path."""
    for pod in (adopted(role), o.pod(role, gated=False, phase="Running", ready=True)):
        actions = d.decide(pod, [], ctx())
        assert not [x for x in actions if isinstance(x, a.EvictPod)]
        create = only(actions, a.CreateWorkload)
        assert create.role == role
        assert create.body["metadata"]["name"] == w.workload_name(pod)
        assert w.queue_name(create.body) == "team-a"
        wanted = c.DEFAULT_HEAD_PRIORITY_CLASS if role == c.ROLE_HEAD else c.DEFAULT_WORKER_PRIORITY_CLASS
        assert w.priority_class_name(create.body) == wanted
        assert create.body["spec"]["priority"] == PRIORITIES[wanted]
        # What decide builds is what it later trusts: the same Workload, no mismatch.
        assert wm.mismatch(create.body, pod) is None


def test_a_running_worker_waits_for_its_heads_admission_before_its_workload():
    actions = d.decide(adopted(c.ROLE_WORKER), [], ctx(head_admitted=False))
    assert only(actions, a.Wait).kind == a.WAIT_FOR_HEAD
    assert not [x for x in actions if isinstance(x, a.CreateWorkload | a.EvictPod)]
    # The head itself never waits.
    assert only(d.decide(adopted(c.ROLE_HEAD), [], ctx(head_admitted=False)), a.CreateWorkload)


def test_a_running_pod_without_a_queue_is_reported_not_deleted():
    pod = adopted(c.ROLE_HEAD)
    del pod["metadata"]["annotations"][c.QUEUE_ANNOTATION]
    actions = d.decide(pod, [], ctx())
    assert only(actions, a.Warn).reason == a.WARN_NO_QUEUE
    assert not [x for x in actions if isinstance(x, a.CreateWorkload | a.EvictPod)]


def test_the_reader_reads_live_only_a_running_pod_of_ours_without_a_workload():
    from raykueue.controller.caches import slim_pod

    pod = adopted(c.ROLE_HEAD)
    running = slim_pod(copy.deepcopy(pod))
    assert d.needs_live_pod_spec(running, [])
    assert only(d.decide(running, [], ctx()), a.Wait)  # a sweep over the cache never raises
    wl = only(d.decide(pod, [], ctx()), a.CreateWorkload).body
    assert not d.needs_live_pod_spec(running, [wl])
    assert not d.needs_live_pod_spec(slim_pod(o.pod()), [])  # gated: its spec is kept
    assert not d.needs_live_pod_spec(None, [])


@pytest.mark.parametrize("pod", [
    pytest.param(lambda: o.pod(gated=False, phase="Running", deleting=True), id="being-deleted"),
    pytest.param(lambda: o.pod(gated=False, phase="Succeeded"), id="ended"),
    pytest.param(lambda: {**(x := o.pod(gated=False, phase="Running")), "metadata": {
        **x["metadata"], "labels": {**x["metadata"]["labels"], c.GANG_LABEL: "rc"}}}, id="gang"),
    pytest.param(lambda: {**(x := o.pod(gated=False, phase="Running")), "metadata": {
        **x["metadata"], "labels": {**x["metadata"]["labels"], c.NODE_TYPE_LABEL: "redis-cleanup"}}},
        id="not-head-or-worker"),
])
def test_other_ungated_pods_without_a_workload_are_left_alone(pod):
    assert not [x for x in d.decide(pod(), [], ctx()) if isinstance(x, a.EvictPod)]


# --- 2. head first ----------------------------------------------------------------------


def test_worker_waits_for_its_head():
    pod = o.pod(c.ROLE_WORKER)
    (action,) = d.decide(pod, [], ctx(head_admitted=False))
    assert isinstance(action, a.Wait)
    assert "raycluster-gpu" in action.reason


def test_worker_goes_once_head_is_admitted():
    pod = o.pod(c.ROLE_WORKER)
    assert isinstance(d.decide(pod, [], ctx(head_admitted=True))[0], a.CreateWorkload)


def test_head_first_off_lets_workers_queue_at_once():
    pod = o.pod(c.ROLE_WORKER)
    actions = d.decide(pod, [], ctx(head_first=False, head_admitted=False))
    assert isinstance(actions[0], a.CreateWorkload)


def test_head_admitted_rules():
    head = o.pod(c.ROLE_HEAD)
    assert not d.head_admitted([])
    assert not d.head_admitted([(head, None)])
    assert not d.head_admitted([(head, o.workload(head, "pending"))])
    assert not d.head_admitted([(head, o.workload(head, "reserved"))])
    assert d.head_admitted([(head, o.workload(head, "admitted"))])
    assert not d.head_admitted([(head, o.workload(head, "evicted"))])
    running = o.pod(c.ROLE_HEAD, gated=False, phase="Running", ready=True)
    assert d.head_admitted([(running, None)])
    going = o.pod(c.ROLE_HEAD, gated=False, phase="Running", deleting=True)
    assert not d.head_admitted([(going, None)])
    # A Workload left by a predecessor with the same name does not count.
    other = o.pod(c.ROLE_HEAD, name=head["metadata"]["name"])
    assert not d.head_admitted([(head, o.workload(other, "admitted"))])


# --- 3. admission lifts the gate -----------------------------------------------------------


def test_quota_reserved_is_not_enough():
    pod = o.pod()
    actions = d.decide(pod, [o.workload(pod, "reserved")], ctx())
    assert all(isinstance(x, a.Wait) for x in actions)
    assert "admission checks" in actions[0].reason or "not all" in actions[0].reason


def test_admitted_lifts_gate_with_flavor_placement():
    pod = o.pod()
    wl = o.workload(pod, "admitted")
    (action,) = d.decide(pod, [wl], ctx())
    assert action == a.LiftGate(
        wl["metadata"]["name"], {"pool": "a100"},
        ({"key": "pool", "operator": "Equal", "value": "a100", "effect": "NoSchedule"},),
        (o.FLAVOR,))


def test_tolerations_the_pod_has_are_not_added_twice():
    pod = o.pod()
    flavors = {o.FLAVOR: o.flavor(tolerations=[dict(o.GPU_TAINT_TOLERATION)])}
    action = only(d.decide(pod, [o.workload(pod, "admitted")], ctx(flavors=flavors)), a.LiftGate)
    assert action.tolerations == ()
    assert action.node_selector == {}


def test_matching_node_selector_is_not_a_conflict():
    pod = o.pod(node_selector={"pool": "a100"})
    action = only(d.decide(pod, [o.workload(pod, "admitted")], ctx()), a.LiftGate)
    assert action.node_selector == {}


def test_conflicting_node_selector_is_reported_and_gate_kept():
    pod = o.pod(node_selector={"pool": "h100"})
    wl = o.workload(pod, "admitted")
    (action,) = d.decide(pod, [wl], ctx())
    assert isinstance(action, a.ReportConflict)
    assert action.kind == a.CONFLICT_NODE_SELECTOR
    assert action.workload == wl["metadata"]["name"]
    assert "pool='h100'" in action.message and "'a100'" in action.message


def test_unknown_flavor_waits_for_the_cache():
    pod = o.pod()
    (action,) = d.decide(pod, [o.workload(pod, "admitted")], ctx(flavors={}))
    assert isinstance(action, a.Wait)
    assert o.FLAVOR in action.reason


def test_admission_check_updates_join_the_placement():
    pod = o.pod()
    wl = o.workload(pod, "admitted")
    wl["status"]["admissionChecks"] = [{"name": "prov", "state": "Ready", "message": "",
                                        "podSetUpdates": [{"name": "main",
                                                           "nodeSelector": {"zone": "z1"}}]}]
    action = only(d.decide(pod, [wl], ctx()), a.LiftGate)
    assert action.node_selector == {"pool": "a100", "zone": "z1"}


# --- readiness ------------------------------------------------------------------------------


def test_ready_pod_sets_pods_ready_started():
    pod = o.pod(gated=False, phase="Running", ready=True)
    wl = o.workload(pod, "admitted")
    (action,) = d.decide(pod, [wl], ctx())
    assert action == a.SetPodsReady(wl["metadata"]["name"], True, "Started", w.READY_MESSAGE)


def test_ready_pod_with_pods_ready_true_needs_nothing():
    pod = o.pod(gated=False, phase="Running", ready=True)
    assert d.decide(pod, [o.workload(pod, "admitted", pods_ready="True")], ctx()) == []


def test_not_ready_after_ready_goes_to_wait_for_recovery_then_recovered():
    pod = o.pod(gated=False, phase="Running", ready=False)
    wl = o.workload(pod, "admitted", pods_ready="True")
    (action,) = d.decide(pod, [wl], ctx())
    assert action == a.SetPodsReady(wl["metadata"]["name"], False, "WaitForRecovery",
                                    w.RECOVERY_MESSAGE)
    ready_again = o.pod(gated=False, phase="Running", ready=True)
    wl2 = o.workload(ready_again, "admitted", pods_ready="False")
    (action,) = d.decide(ready_again, [wl2], ctx())
    assert action.reason == "Recovered" and action.ready


def test_not_yet_ready_writes_nothing():
    pod = o.pod(gated=False, phase="Pending", ready=False)
    assert d.decide(pod, [o.workload(pod, "admitted")], ctx()) == []


# --- 4. scale-down -------------------------------------------------------------------------


@pytest.mark.parametrize(("phase", "reason"), [
    ("Succeeded", a.FINISHED_SUCCEEDED),
    ("Failed", a.FINISHED_FAILED),
])
def test_pod_that_ended_and_stays_finishes_its_workload(phase, reason):
    pod = o.pod(gated=False, phase=phase, ready=False)
    wl = o.workload(pod, "admitted", pods_ready="True")
    (action,) = d.decide(pod, [wl], ctx())
    assert isinstance(action, a.FinishWorkload)
    assert action.workload == wl["metadata"]["name"]
    assert action.reason == reason


def stopped(pod: dict, kind: str = "terminated") -> dict:
    """What the kubelet reports once each container's process has ended."""
    pod["status"]["containerStatuses"] = [{"name": x["name"], "state": {kind: {}}}
                                          for x in pod["spec"]["containers"]]
    return pod


@pytest.mark.parametrize(("phase", "stop", "reason"), [
    ("Running", True, a.FINISHED_POD_DELETED),
    ("Succeeded", False, a.FINISHED_SUCCEEDED),
])
def test_pod_being_deleted_takes_its_workload_along_once_it_has_stopped(phase, stop, reason):
    pod = o.pod(gated=False, phase=phase, ready=False, deleting=True)
    if stop:
        stopped(pod)
    wl = o.workload(pod, "admitted", pods_ready="True")
    (action,) = d.decide(pod, [wl], ctx())
    assert isinstance(action, a.DeleteWorkload)
    assert action.workload == wl["metadata"]["name"]
    assert action.uid == wl["metadata"]["uid"] and action.uid  # conditional on this one
    assert action.reason == reason


@pytest.mark.parametrize("status", [None, "running", "waiting"])
def test_pod_being_deleted_that_still_runs_keeps_its_quota(status):
    """Issue 28: the Workload used to go as soon as the pod had a deletionTimestamp,
    so a pod with a day-long grace period and a preStop hook ran a day outside quota
    while KubeRay's replacement took quota of its own. It now waits until the kubelet
    says every container has terminated (no status yet: it may run)."""
    pod = o.pod(gated=False, phase="Running", ready=True, deleting=True)
    if status is not None:
        stopped(pod, status)
    (action,) = d.decide(pod, [o.workload(pod, "admitted", pods_ready="True")], ctx())
    assert isinstance(action, a.Wait) and "holds its quota" in action.reason
    half = stopped(copy.deepcopy(pod))
    half["status"]["containerStatuses"][0]["state"] = {"running": {}}
    half["status"]["containerStatuses"].append({"name": "sidecar", "state": {"terminated": {}}})
    assert isinstance(d.decide(half, [o.workload(half, "admitted")], ctx())[0], a.Wait)


def test_finished_workload_of_a_pod_being_deleted_is_left_to_the_collector():
    pod = o.pod(gated=False, phase="Succeeded", ready=False, deleting=True)
    wl = o.workload(pod, "finished")
    assert d.decide(pod, [wl], ctx()) == []


def test_gated_pod_deleted_before_admission_takes_its_workload_too():
    pod = o.pod(deleting=True)
    (action,) = d.decide(pod, [o.workload(pod, "pending")], ctx())
    assert isinstance(action, a.DeleteWorkload)


def test_deleting_pod_without_workload_gets_none():
    assert d.decide(o.pod(deleting=True), [], ctx()) == []


def test_finished_workload_is_not_finished_again():
    pod = o.pod(gated=False, phase="Running", deleting=True)
    assert d.decide(pod, [o.workload(pod, "finished")], ctx()) == []


def test_vanished_pod_finishes_its_workload():
    pod = o.pod(gated=False, phase="Running", ready=True)
    wl = o.workload(pod, "admitted")
    (action,) = d.decide(None, [wl], ctx())
    assert action == a.FinishWorkload(wl["metadata"]["name"], a.FINISHED_OWNER_NOT_FOUND,
                                      action.message)
    assert pod["metadata"]["name"] in action.message


# The pod left the cache: its last state and the live check are inputs.


def test_vanished_pod_whose_last_state_was_deleting_takes_its_workload_along():
    pod = o.pod(gated=False, phase="Running", ready=True, deleting=True)
    wl = o.workload(pod, "admitted")
    (action,) = d.decide(None, [wl], ctx(departed=pod))
    assert isinstance(action, a.DeleteWorkload)
    assert action.reason == a.FINISHED_POD_DELETED
    assert not d.needs_live_pod([wl], pod)


def test_a_deleted_pods_workload_is_left_to_the_collector_for_its_grace():
    """The pod is gone and is the Workload's only owner: the garbage collector deletes
    the Workload, and ours beside it would be a second DELETE (one answered 404)."""
    pod = o.pod(gated=False, phase="Running", ready=True, deleting=True)
    wl = o.workload(pod, "admitted")
    del wl["metadata"]["finalizers"]  # raykueue's Workloads carry none
    (wait,) = d.decide(None, [wl], ctx(departed=pod, now=101.0, departed_at=100.0))
    assert isinstance(wait, a.Wait) and wait.after == pytest.approx(4.0)
    assert wl["metadata"]["name"] in wait.reason and "garbage collector" in wait.reason
    # Once the grace has run out it is ours; with no time to count from, at once.
    for late in (ctx(departed=pod, now=105.0, departed_at=100.0),
                 ctx(departed=pod, now=101.0, departed_at=100.0, collector_grace=0.5),
                 ctx(departed=pod, departed_at=100.0), ctx(departed=pod, now=101.0)):
        (action,) = d.decide(None, [wl], late)
        assert isinstance(action, a.DeleteWorkload) and action.reason == a.FINISHED_POD_DELETED


def test_a_workload_the_collector_would_not_take_is_deleted_at_once():
    pod = o.pod(gated=False, phase="Running", ready=True, deleting=True)
    other_owner = o.workload(pod, "admitted")
    del other_owner["metadata"]["finalizers"]
    other_owner["metadata"]["ownerReferences"].append(
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "keep", "uid": "u-keep"})
    held = o.workload(pod, "admitted")
    held["metadata"]["finalizers"] = ["example.com/hold"]  # the collector's delete only marks it
    for wl in (other_owner, held):
        (action,) = d.decide(None, [wl], ctx(departed=pod, now=101.0, departed_at=100.0))
        assert isinstance(action, a.DeleteWorkload), wl["metadata"]


def test_vanished_pod_whose_last_state_was_succeeded_finishes_with_that_reason():
    pod = o.pod(gated=False, phase="Succeeded")
    wl = o.workload(pod, "admitted")
    (action,) = d.decide(None, [wl], ctx(departed=pod))
    assert action == a.FinishWorkload(wl["metadata"]["name"], a.FINISHED_SUCCEEDED, action.message)


def test_pod_that_left_the_cache_but_still_exists_keeps_its_workload():
    # It lost our label: the watch reports it DELETED, with no deletionTimestamp.
    pod = o.pod(gated=False, phase="Running", ready=True)
    wl = o.workload(pod, "admitted")
    assert d.needs_live_pod([wl], pod)
    (action,) = d.decide(None, [wl], ctx(departed=pod, live_pod_uid=pod["metadata"]["uid"]))
    assert isinstance(action, a.Warn) and action.reason == a.WARN_LABEL_REMOVED
    assert wl["metadata"]["name"] in action.message


def test_namesake_in_place_of_a_vanished_pod_does_not_save_its_workload():
    pod = o.pod(gated=False, phase="Running", ready=True)
    wl = o.workload(pod, "admitted")
    (action,) = d.decide(None, [wl], ctx(live_pod_uid=o.next_uid()))
    assert isinstance(action, a.FinishWorkload)
    assert action.reason == a.FINISHED_OWNER_NOT_FOUND


def test_live_check_is_needed_only_for_a_workload_that_would_be_finished():
    pod = o.pod(gated=False, phase="Running", ready=True)
    assert d.needs_live_pod([o.workload(pod, "admitted")], None)
    assert not d.needs_live_pod([o.workload(pod, "finished")], None)
    assert not d.needs_live_pod([o.workload(pod, "admitted", ours=False)], None)
    assert not d.needs_live_pod([], None)


def test_workload_being_deleted_is_not_finished():
    pod = o.pod()
    wl = o.workload(pod, "admitted")
    wl["metadata"]["deletionTimestamp"] = o.T2
    assert d.decide(None, [wl], ctx()) == []


def test_namesake_predecessors_workload_is_finished_and_new_pod_gets_its_own():
    old = o.pod(c.ROLE_HEAD, name="raycluster-gpu-head")
    new = o.pod(c.ROLE_HEAD, name="raycluster-gpu-head")
    old_wl = o.workload(old, "admitted")
    actions = d.decide(new, [old_wl], ctx())
    assert isinstance(actions[0], a.FinishWorkload)
    assert actions[0].workload == old_wl["metadata"]["name"]
    assert isinstance(actions[1], a.CreateWorkload)
    assert actions[1].body["metadata"]["name"] != old_wl["metadata"]["name"]


def test_kueue_workload_of_vanished_pod_is_not_ours_to_finish():
    pod = o.pod()
    assert d.decide(None, [o.workload(pod, "admitted", ours=False)], ctx()) == []


def test_duplicate_workloads_keep_the_deterministic_one():
    pod = o.pod()
    right = o.workload(pod, "admitted")
    extra = o.workload(pod, "pending")
    extra["metadata"]["name"] = "stray-copy"
    actions = d.decide(pod, [extra, right], ctx())
    assert actions[0] == a.FinishWorkload("stray-copy", a.FINISHED_DUPLICATE, actions[0].message)
    assert isinstance(actions[1], a.LiftGate)
    assert actions[1].workload == right["metadata"]["name"]


def test_workload_being_deleted_blocks_a_new_one_until_gone():
    pod = o.pod()
    wl = o.workload(pod, "pending")
    wl["metadata"]["deletionTimestamp"] = o.T2
    (action,) = d.decide(pod, [wl], ctx())
    assert isinstance(action, a.Wait)


# --- 5. eviction ------------------------------------------------------------------------------


def test_evicted_worker_is_deleted_then_finished():
    pod = o.pod(gated=False, phase="Running", ready=True)
    wl = o.workload(pod, "evicted", pods_ready="True")
    evict, finish = d.decide(pod, [wl], ctx())
    assert evict == a.EvictPod(wl["metadata"]["name"], "Preempted",
                               w.condition(wl, w.EVICTED)["message"], head=False)
    assert isinstance(finish, a.FinishWorkload)
    assert finish.reason == a.FINISHED_EVICTED
    assert "Preempted" in finish.message


def test_evicted_head_is_flagged():
    head = o.pod(c.ROLE_HEAD, gated=False, phase="Running", ready=True)
    evict, _ = d.decide(head, [o.workload(head, "evicted")], ctx())
    assert evict.head


def test_evicted_while_still_gated_is_deleted_too():
    pod = o.pod()
    evict, finish = d.decide(pod, [o.workload(pod, "evicted")], ctx())
    assert isinstance(evict, a.EvictPod) and isinstance(finish, a.FinishWorkload)


def test_evicted_pod_already_terminating_only_loses_its_workload_once_stopped():
    # Issue 28: while it terminates it still runs, so its Workload keeps the quota.
    pod = o.pod(gated=False, phase="Running", deleting=True)
    (action,) = d.decide(pod, [o.workload(pod, "evicted")], ctx())
    assert isinstance(action, a.Wait)
    (action,) = d.decide(stopped(pod), [o.workload(pod, "evicted")], ctx())
    assert isinstance(action, a.DeleteWorkload)
    assert action.reason == a.FINISHED_POD_DELETED


def test_pods_ready_timeout_eviction_uses_kueues_reason():
    pod = o.pod(gated=False, phase="Running", ready=False)
    wl = o.workload(pod, "admitted", extra_conditions=[{
        "type": "Evicted", "status": "True", "reason": "PodsReadyTimeout",
        "message": "Exceeded the PodsReady timeout default/x", "lastTransitionTime": o.T2}])
    evict, _ = d.decide(pod, [wl], ctx())
    assert evict.reason == "PodsReadyTimeout"


# --- 7. overlap with Kueue's own integrations ----------------------------------------------


def test_pod_with_kueues_gate_is_left_alone():
    pod = o.pod()
    pod["spec"]["schedulingGates"].append({"name": c.KUEUE_POD_GATE})
    (action,) = d.decide(pod, [], ctx())
    assert isinstance(action, a.ReportConflict)
    assert action.kind == a.CONFLICT_KUEUE_POD
    assert c.KUEUE_POD_GATE in action.message


def test_pod_with_kueues_managed_label_is_left_alone_even_when_admitted():
    pod = o.pod()
    pod["metadata"]["labels"][c.KUEUE_MANAGED_LABEL] = "true"
    (action,) = d.decide(pod, [o.workload(pod, "admitted")], ctx())
    assert isinstance(action, a.ReportConflict)


def test_workload_created_by_kueue_for_our_pod_is_a_conflict():
    pod = o.pod()
    theirs = o.workload(pod, "pending", ours=False)
    (action,) = d.decide(pod, [theirs], ctx())
    assert isinstance(action, a.ReportConflict)
    assert action.kind == a.CONFLICT_KUEUE_WORKLOAD
    assert theirs["metadata"]["name"] in action.message


# --- oddities ---------------------------------------------------------------------------------


def test_finished_workload_with_gated_pod_asks_for_help():
    pod = o.pod()
    (action,) = d.decide(pod, [o.workload(pod, "finished")], ctx())
    assert isinstance(action, a.Warn)
    assert action.reason == a.WARN_FINISHED_WHILE_GATED


def test_ungated_pod_with_pending_workload_is_reported():
    pod = o.pod(gated=False, phase="Running")
    (action,) = d.decide(pod, [o.workload(pod, "pending")], ctx())
    assert isinstance(action, a.Warn)
    assert action.reason == a.WARN_UNGATED_NOT_ADMITTED


def test_decisions_are_idempotent_on_the_state_they_produce():
    """Deciding again on the state an action leads to asks for nothing more."""
    pod = o.pod(gated=False, phase="Running", ready=True)
    wl = o.workload(pod, "admitted")
    (action,) = d.decide(pod, [wl], ctx())
    body = ws.status_apply_body(wl, [ws.ConditionUpdate(w.PODS_READY, action.ready, action.reason,
                                                      action.message)], o.T2)
    wl["status"]["conditions"] += body["status"]["conditions"]
    assert d.decide(pod, [wl], ctx()) == []


def test_pods_ready_is_not_written_when_turned_off():
    pod = o.pod(gated=False, phase="Running", ready=True)
    wl = o.workload(pod, "admitted")
    (action,) = d.decide(pod, [wl], ctx())
    assert isinstance(action, a.SetPodsReady) and action.ready
    assert d.decide(pod, [wl], ctx(pods_ready=False)) == []
