"""The controller against a real kube-apiserver.

What the in-memory fake cannot prove: that the server accepts our Workloads
(CRD schema and CEL rules), our gate-lifting JSON patch on a gated pod, our
server-side applies on the status subresources without losing Kueue's
conditions, the uid-conditioned delete, and that the shipped ClusterRole is
enough for all of it. The controller runs in-process, as raykueue's
ServiceAccount (impersonated, bound to a copy of manifests/rbac.yaml's
ClusterRole), restricted to the test's namespace.

Kueue is played by the test (testkit/standins.py), as Kueue's own integration tests do: admission
is a server-side apply of status.admission + QuotaReserved + Admitted under
Kueue's field manager. The Workloads name a LocalQueue that does not exist,
so a Kueue that happens to run on a shared stack leaves them pending.
"""

from __future__ import annotations

import copy

import pytest

from raykueue.controller import workload as w
from raykueue.controller import workload_match as wm
from raykueue.controller.explain import explain_pod
from raykueue.core import contract as c
from raykueue.kube.resources import PODS, crd
from raykueue.kube.rest import ApiError
from testkit import reviews as rv
from testkit.api.controller import stays
from testkit.reviews import gates
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture
from testkit.standins import (
    KUEUE_MANAGER,
    LOCAL_QUEUE,
    WORKLOADS,
    admit,
    cond,
    create_pod,
    events_for,
    evict,
    live,
    make_ready,
    ray_pod,
    release,
    workload_of,
    workloads_in,
)
from testkit.waiting import wait_for

# --- tests ----------------------------------------------------------------------------


def test_lifecycle_head_first_with_four_writes_per_pod(admin, ns, scope, as_controller,
                                                       run_controller):
    head = create_pod(admin, ray_pod(ns, scope, "head", "rc-head"))
    worker = create_pod(admin, ray_pod(ns, scope, "worker", "rc-worker-a", hold=True))
    run_controller()

    # 1. The head's Workload, as the server stored it.
    head_wl = wait_for(lambda: workload_of(admin, head), timeout=30, message="head Workload")
    assert head_wl["spec"]["priorityClassRef"] == {
        "group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": scope["head"]}
    assert head_wl["spec"]["priority"] == 1000
    assert head_wl["spec"]["queueName"] == LOCAL_QUEUE
    (pod_set,) = head_wl["spec"]["podSets"]
    assert pod_set["name"] == "main" and pod_set["count"] == 1
    assert "schedulingGates" not in pod_set["template"]["spec"]
    assert pod_set["template"]["spec"]["containers"][0]["name"] == "ray-head"
    (owner,) = head_wl["metadata"]["ownerReferences"]
    assert owner["uid"] == head["metadata"]["uid"] and owner["blockOwnerDeletion"] is True
    assert head_wl["metadata"]["labels"][c.POD_UID_LABEL] == head["metadata"]["uid"]
    assert head_wl["metadata"]["labels"][c.MANAGED_BY_LABEL] == c.MANAGED_BY_VALUE

    # 2. Head first: no worker Workload while the head waits.
    assert stays(lambda: workload_of(admin, worker) is None)

    # 3. Admitted: one patch lifts the gate and places the pod.
    admit(admin, head, scope)
    lifted = wait_for(lambda: (p := live(admin, head)) and not gates(p) and p, timeout=30,
                      message="head gate lifted")
    assert lifted["spec"]["nodeSelector"]["raykueue.io/test-pool"] == ns
    assert {"key": "raykueue.io/test-pool", "operator": "Equal", "value": ns,
            "effect": "NoSchedule"} in lifted["spec"]["tolerations"]
    assert c.GATE not in gates(lifted)

    admit(admin, worker, scope)
    wait_for(lambda: not gates(live(admin, worker)), timeout=30, message="worker gate lifted")

    # 4. Ready -> PodsReady=True, beside Kueue's own conditions.
    make_ready(admin, worker)
    ready = wait_for(lambda: (x := workload_of(admin, worker)) and
                     (cond(x, "PodsReady") or {}).get("status") == "True" and x,
                     timeout=30, message="PodsReady=True")
    assert cond(ready, "PodsReady")["reason"] == "Started"
    assert cond(ready, "Admitted")["status"] == "True"
    managers = {f["manager"] for f in ready["metadata"]["managedFields"]}
    assert {"raykueue", KUEUE_MANAGER} <= managers

    # 5. Scale-down: the Workload goes at once, while the pod still terminates
    # (its finalizer stands in for the grace period), so Kueue frees the quota
    # without waiting for the garbage collector.
    admin.delete(PODS.path(ns, "rc-worker-a"))
    wait_for(lambda: workload_of(admin, worker) is None, timeout=30, message="Workload deleted")
    terminating = live(admin, worker)
    assert terminating is not None and terminating["metadata"].get("deletionTimestamp")
    release(admin, worker)

    # POST Workload, PATCH gate, apply (PATCH) PodsReady, DELETE Workload.
    writes = as_controller.writes_about("rc-worker-a")
    assert sorted(m for m, _ in writes) == ["DELETE", "PATCH", "PATCH", "POST"], writes
    assert len(writes) == 4, writes


def test_a_worker_queues_behind_a_head_raykueue_never_gated(admin, ns, scope, run_controller):
    """Issue 21: heads were looked for only among pods labelled ours. A head made
    before raykueue was installed (or before the opt-in) has no label of ours and
    no gate; its workers waited for it for ever."""
    worker = create_pod(admin, ray_pod(ns, scope, "worker", "rc-worker"))
    run_controller()
    assert stays(lambda: workload_of(admin, worker) is None), "no head at all yet: it waits"
    head = rv.creatable_pod("head")
    head["metadata"].pop("generateName", None)
    head["metadata"].update(name="rc-head", namespace=ns)
    head["metadata"]["labels"].update({c.CLUSTER_LABEL: "rc", c.NODE_TYPE_LABEL: c.ROLE_HEAD})
    assert c.MANAGED_BY_LABEL not in head["metadata"]["labels"] and not gates(head)
    create_pod(admin, head)
    wait_for(lambda: workload_of(admin, worker), timeout=30,
             message="the worker's Workload once its (foreign) head exists")
    assert workload_of(admin, head) is None, "the foreign head is not ours to queue"


def test_a_running_pods_workload_deleted_by_hand_gets_a_new_one_never_a_delete(
        admin, ns, scope, run_controller):
    """Issue 21, then issue 28: anyone allowed to delete Workloads (Kueue's batch-admin
    role) could free a running pod's quota. raykueue made the pod's Workload again
    (from a live read of the pod), so Kueue counts it again; it never deletes the pod."""
    pod = create_pod(admin, ray_pod(ns, scope, "worker", "rc-worker-d", hold=True))
    run_controller(head_first=False)
    admit(admin, pod, scope)
    wait_for(lambda: not gates(live(admin, pod)), timeout=30, message="gate lifted")
    first = workload_of(admin, pod)
    assert first is not None

    admin.delete(WORKLOADS.path(ns, w.workload_name(pod)))
    again = wait_for(lambda: (x := workload_of(admin, pod)) and x["metadata"]["uid"] !=
                     first["metadata"]["uid"] and x, timeout=30,
                     message="a new Workload for the running pod")
    assert w.pod_uid_of(again) == pod["metadata"]["uid"] and wm.mismatch(again, live(admin, pod)) is None
    still = live(admin, pod)
    assert still["metadata"]["uid"] == pod["metadata"]["uid"]
    assert not still["metadata"].get("deletionTimestamp"), "the pod is never deleted for it"
    release(admin, pod)


def test_eviction_condition_event_delete_and_finish(admin, ns, scope, run_controller):
    pod = create_pod(admin, ray_pod(ns, scope, "worker", "rc-worker-e", hold=True))
    run_controller(head_first=False)
    admit(admin, pod, scope)
    wait_for(lambda: not gates(live(admin, pod)), timeout=30, message="gate lifted")

    evict(admin, pod, scope)
    going = wait_for(lambda: (p := live(admin, pod)) and p["metadata"].get("deletionTimestamp")
                     and p, timeout=30, message="evicted pod deleted")
    (condition,) = [x for x in going["status"]["conditions"]
                    if x["type"] == c.EVICTED_CONDITION]
    assert condition["status"] == "True" and condition["reason"] == "Preempted"
    assert "Preempted to accommodate a workload" in condition["message"]
    done = wait_for(lambda: (x := workload_of(admin, pod)) and cond(x, "Finished") and x,
                    timeout=30, message="Finished after eviction")
    assert cond(done, "Finished")["reason"] == "Evicted"
    assert cond(done, "Evicted")["status"] == "True"  # Kueue's condition untouched
    reasons = {e["reason"] for e in events_for(admin, ns, "rc-worker-e")}
    assert "Evicted" in reasons
    release(admin, pod)


def test_restart_mid_way_never_duplicates_and_adopts(admin, ns, scope, as_controller,
                                                     run_controller):
    pods = [create_pod(admin, ray_pod(ns, scope, "worker", f"rc-w{i}")) for i in range(6)]
    first = run_controller(head_first=False)
    wait_for(lambda: workloads_in(admin, ns), timeout=30, message="a first Workload")
    first.stop()  # somewhere in the middle of creating them

    for pod in pods[:2]:
        if workload_of(admin, pod) is not None:
            admit(admin, pod, scope)
    second = run_controller(head_first=False)
    wait_for(lambda: len(workloads_in(admin, ns)) == 6, timeout=30, message="6 Workloads")
    for pod in pods[:2]:
        admit(admin, pod, scope)
    for pod in pods[:2]:
        wait_for(lambda p=pod: not gates(live(admin, p)), timeout=30, message="gate lifted")
    assert stays(lambda: len(workloads_in(admin, ns)) == 6)
    owners = sorted(x["metadata"]["ownerReferences"][0]["uid"] for x in workloads_in(admin, ns))
    assert owners == sorted(p["metadata"]["uid"] for p in pods)  # exactly one each
    created = [x for x in as_controller.writes if x[0] == "POST" and "/workloads" in x[1]]
    assert len(created) <= 6 + 1  # at most one refused create, for a create the stop interrupted
    assert second.controller.synced


def test_workload_orphaned_while_down_is_finished_on_start(admin, ns, scope, run_controller):
    pod = create_pod(admin, ray_pod(ns, scope, "worker", "rc-orphan"))
    first = run_controller(head_first=False)
    admit(admin, pod, scope)
    wait_for(lambda: not gates(live(admin, pod)), timeout=30, message="gate lifted")
    first.stop()
    # The pod goes while no controller runs, its Workload left behind ownerless:
    # what the collector's orphaning does, written directly, because a
    # collector that has not synced its Workload monitor yet (a fresh stack)
    # deletes the Workload as garbage instead.
    admin.json_patch(WORKLOADS.path(ns, w.workload_name(pod)),
                     [{"op": "remove", "path": "/metadata/ownerReferences"}])
    admin.delete(PODS.path(ns, "rc-orphan"), {"apiVersion": "v1", "kind": "DeleteOptions",
                                              "gracePeriodSeconds": 0})
    wait_for(lambda: live(admin, pod) is None, timeout=60, message="the pod to be gone")
    assert workload_of(admin, pod) is not None
    run_controller(head_first=False)
    done = wait_for(lambda: (x := workload_of(admin, pod)) and cond(x, "Finished") and x,
                    timeout=30, message="orphan finished")
    assert cond(done, "Finished")["reason"] == "OwnerNotFound"
    admin.delete(WORKLOADS.path(ns, w.workload_name(pod)))


def test_node_selector_conflict_keeps_the_gate_and_tells(admin, ns, scope, run_controller):
    pod = create_pod(admin, ray_pod(ns, scope, "head", "rc-head-ns",
                                    node_selector={"raykueue.io/test-pool": "elsewhere"}))
    running = run_controller()
    admit(admin, pod, scope)
    wl_name = w.workload_name(pod)
    wait_for(lambda: {"NodeSelectorConflict"} <= {e["reason"] for e in
                                                   events_for(admin, ns, wl_name)},
             timeout=30, message="conflict event on the Workload")
    assert "NodeSelectorConflict" in {e["reason"] for e in events_for(admin, ns, "rc-head-ns")}
    assert gates(live(admin, pod)) == [c.GATE]
    assert f"{ns}/rc-head-ns" in running.controller.conflicts()


def test_kueue_workload_for_our_pod_is_left_alone(admin, ns, scope, run_controller):
    pod = create_pod(admin, ray_pod(ns, scope, "head", "rc-head-k"))
    theirs = w.build_workload(pod, w.Priority(scope["head"], 1000))
    theirs["metadata"]["name"] = f"pod-rc-head-k-{w.short_hash('kueue')[:5]}"
    theirs["metadata"]["labels"] = {"kueue.x-k8s.io/job-uid": pod["metadata"]["uid"]}
    admin.create(WORKLOADS.path(ns), theirs)
    running = run_controller()
    wait_for(lambda: "KueueWorkload" in {e["reason"] for e in events_for(admin, ns, "rc-head-k")},
             timeout=30, message="conflict event")
    assert stays(lambda: workload_of(admin, pod) is None)
    assert "KueueWorkload" in running.controller.conflicts()[f"{ns}/rc-head-k"]


def test_v1beta1_workloads_pass_the_crd_schema(admin, ns, scope):
    """The v1beta1 shape (for a Kueue that serves only v1beta1) passes that
    version's schema and CEL rules (priorityClassName needs priority).

    On this Kueue (v0.19) v1beta1 is served without conversion and stored as
    v1beta2, whose schema prunes `priorityClassName`/`priorityClassSource`:
    exactly why the controller prefers v1beta2 wherever it is served.
    """
    pod = create_pod(admin, ray_pod(ns, scope, "head", "rc-head-b1"))
    body = w.build_workload(pod, w.Priority(scope["head"], 1000), w.V1BETA1)
    v1beta1 = crd(c.KUEUE_GROUP, "v1beta1", "workloads")
    stored = admin.create(v1beta1.path(ns), body)
    assert stored["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    assert stored["spec"]["priority"] == 1000
    assert stored["spec"]["queueName"] == LOCAL_QUEUE
    broken = copy.deepcopy(body)
    broken["metadata"]["name"] += "-x"
    del broken["spec"]["priority"]
    with pytest.raises(ApiError) as info:
        admin.create(v1beta1.path(ns), broken)
    assert info.value.status == 422


def test_explain_pod_on_the_real_api(admin, ns, scope, run_controller):
    head = create_pod(admin, ray_pod(ns, scope, "head", "rc-head-x"))
    worker = create_pod(admin, ray_pod(ns, scope, "worker", "rc-worker-x"))
    run_controller()
    wait_for(lambda: workload_of(admin, head), timeout=30, message="head Workload")
    text = explain_pod(admin, ns, "rc-worker-x")
    assert "head of Ray cluster rc not admitted yet" in text
    text = explain_pod(admin, ns, "rc-head-x")
    assert w.workload_name(head) in text
    assert f"LocalQueue {LOCAL_QUEUE} (not found)" in text
    assert f"priority:   {scope['head']} (1000)" in text
    assert explain_pod(admin, ns, "nope") == f"pod {ns}/nope not found"
    del worker
