"""The loop against an in-memory API server: writes, their order and count."""

from __future__ import annotations

import copy
import logging
import threading

import pytest
from prometheus_client import REGISTRY

from raykueue.controller import actions as a
from raykueue.controller import workload as w
from raykueue.controller.config import ControllerConfig
from raykueue.controller.keys import PodKey
from raykueue.controller.loop import Controller
from raykueue.core import contract as c
from raykueue.kube.rest import ApiError
from testkit import controller_objects as o
from testkit.controller_world import World
from testkit.unit.controller_loop import NS, controller, counter, drain, run_pod, seed
from testkit.waiting import wait_for, within


def admit(world: World, name: str, *, flavor: str = o.FLAVOR) -> None:
    """Write what Kueue writes on admission: status.admission, QuotaReserved and
    Admitted, in one status update."""
    wl = copy.deepcopy(world.get_obj("workloads", NS, name))
    assert wl is not None, name
    pod_uid = wl["metadata"]["labels"][c.POD_UID_LABEL]
    pod = next(p for p in world.of("pods") if p["metadata"]["uid"] == pod_uid)
    admitted = o.workload(pod, "admitted", flavor=flavor)
    wl.setdefault("status", {})["admission"] = admitted["status"]["admission"]
    wl["status"]["conditions"] = [x for x in wl["status"].get("conditions", [])
                                  if x["type"] not in (w.QUOTA_RESERVED, w.ADMITTED)]
    wl["status"]["conditions"] += [x for x in admitted["status"]["conditions"]]
    world.put("workloads", wl)


def evict(world: World, name: str) -> None:
    wl = copy.deepcopy(world.get_obj("workloads", NS, name))
    pod = next(p for p in world.of("pods")
               if p["metadata"]["uid"] == wl["metadata"]["labels"][c.POD_UID_LABEL])
    wl["status"]["conditions"] += [x for x in o.workload(pod, "evicted")["status"]["conditions"]
                                   if x["type"] in (w.EVICTED, w.PREEMPTED)]
    world.put("workloads", wl)


def wl_name(pod: dict) -> str:
    return w.workload_name(pod)


# --- the whole lifecycle ------------------------------------------------------------


def test_head_first_lifecycle_and_three_writes_for_a_pod_that_is_deleted_and_gone():
    world = World()
    seed(world)
    head = world.put("pods", o.pod(c.ROLE_HEAD, name="rc-head"))
    worker = world.put("pods", o.pod(c.ROLE_WORKER, name="rc-worker-a"))
    ctl, recorder = controller(world)
    drain(ctl, world)

    # Only the head queues; the worker waits for it.
    assert [x["metadata"]["name"] for x in world.of("workloads")] == [wl_name(head)]
    head_wl = world.get_obj("workloads", NS, wl_name(head))
    assert head_wl["spec"]["priority"] == 1000

    admit(world, wl_name(head))
    world.deliver()
    drain(ctl, world)
    live_head = world.get_obj("pods", NS, "rc-head")
    assert live_head["spec"].get("schedulingGates") in (None, [])
    assert live_head["spec"]["nodeSelector"] == {"pool": "a100"}
    assert world.get_obj("workloads", NS, wl_name(worker)) is not None

    admit(world, wl_name(worker))
    world.deliver()
    drain(ctl, world)
    run_pod(world, head)
    run_pod(world, worker)
    world.deliver()
    drain(ctl, world)
    for pod in (head, worker):
        wl = world.get_obj("workloads", NS, wl_name(pod))
        assert w.condition(wl, w.PODS_READY)["reason"] == "Started"

    # Scale-down: the autoscaler deletes the worker (kwok removes it at once).
    with world.unrecorded():
        world.delete(f"/api/v1/namespaces/{NS}/pods/rc-worker-a")
    world.deliver()
    drain(ctl, world)
    # The pod is gone: its Workload is the garbage collector's to delete (its only
    # owner went), and ours beside it would be one DELETE more.
    assert world.get_obj("workloads", NS, wl_name(worker)) is not None
    gone_before = REGISTRY.get_sample_value("raykueue_workloads_gone_total",
                                            {"role": c.ROLE_WORKER}) or 0.0
    with world.unrecorded():  # the collector's delete (its collect_garbage would take
        # the head too: the fake holds no RayCluster for its owner reference)
        world.delete(f"/apis/kueue.x-k8s.io/{world.version}/namespaces/{NS}/workloads/"
                     f"{wl_name(worker)}")
    world.deliver()
    drain(ctl, world)
    assert world.of("workloads") == [world.get_obj("workloads", NS, wl_name(head))]
    assert ctl.state.departed((NS, "rc-worker-a")) is None  # its last state kept no longer
    # The collector's delete is not ours, yet the churn metric sees the Workload go.
    assert REGISTRY.get_sample_value("raykueue_workloads_gone_total",
                                     {"role": c.ROLE_WORKER}) == gone_before + 1

    worker_writes = [call for call in world.writes()]
    assert worker_writes.count(("create", "workloads")) == 2
    assert worker_writes.count(("patch", "pods")) == 2
    assert worker_writes.count(("apply", "workloads/status")) == 2  # PodsReady, each pod
    assert worker_writes.count(("delete", "workloads")) == 0
    assert len(worker_writes) == 6  # 3 for the worker's whole life, 3 so far for the head
    assert recorder.events == []  # nothing needed a human


def head_with_workload(**config) -> tuple[World, Controller, dict]:
    """A gated head pod whose Workload the controller has created (not admitted)."""
    world = World()
    seed(world)
    head = world.put("pods", o.pod(c.ROLE_HEAD))
    ctl, _ = controller(world, **config)
    drain(ctl, world)
    return world, ctl, head


def running_head(**config) -> tuple[World, Controller, dict]:
    """A head pod admitted, past its gate and Running, the controller caught up."""
    world, ctl, head = head_with_workload(**config)
    admit(world, wl_name(head))
    world.deliver()
    drain(ctl, world)
    run_pod(world, head)
    world.deliver()
    drain(ctl, world)
    return world, ctl, head


def test_the_pods_final_delete_does_not_delete_its_workload_again():
    world, ctl, head = running_head()

    def only_pods_arrive() -> None:
        # The pod watch runs ahead of the Workload watch.
        for cache in world.caches:
            if cache.plural == "pods":
                cache.sync()
        while (key := ctl.queue.get(timeout=0)) is not None:
            ctl.process(key)

    # The autoscaler deletes the pod: first its grace period, while it still runs
    # (issue 28: its Workload keeps the quota until it has stopped) ...
    going = copy.deepcopy(world.get_obj("pods", NS, head["metadata"]["name"]))
    going["metadata"]["deletionTimestamp"] = "2026-12-02T09:44:00Z"
    world.put("pods", going)
    only_pods_arrive()
    assert world.get_obj("workloads", NS, wl_name(head)) is not None
    # ... the kubelet reports its containers terminated: the quota goes ...
    going = copy.deepcopy(going)
    going["status"]["containerStatuses"] = [{"name": x["name"], "state": {"terminated": {}}}
                                            for x in going["spec"]["containers"]]
    world.put("pods", going)
    only_pods_arrive()
    assert world.get_obj("workloads", NS, wl_name(head)) is None
    # ... then the kubelet's final delete, before the Workload's DELETED event.
    world.delete(f"/api/v1/namespaces/{NS}/pods/{head['metadata']['name']}")
    only_pods_arrive()
    assert world.writes().count(("delete", "workloads")) == 1


def test_pod_that_succeeds_and_stays_keeps_a_finished_workload():
    world, ctl, head = running_head()
    live = copy.deepcopy(world.get_obj("pods", NS, head["metadata"]["name"]))
    live["status"] = o.pod(gated=False, phase="Succeeded", ready=False)["status"]
    world.put("pods", live)
    world.deliver()
    drain(ctl, world)
    finished = world.get_obj("workloads", NS, wl_name(head))
    cond = w.condition(finished, w.FINISHED)
    assert cond["status"] == "True" and cond["reason"] == a.FINISHED_SUCCEEDED
    # PodsReady survives the finish: each apply carries every condition we own.
    assert w.condition(finished, w.PODS_READY)["status"] == "True"


def test_worker_with_head_first_off_queues_at_once():
    world = World()
    seed(world)
    worker = world.put("pods", o.pod(c.ROLE_WORKER))
    ctl, _ = controller(world, head_first=False)
    drain(ctl, world)
    assert world.get_obj("workloads", NS, wl_name(worker)) is not None


def test_worker_queues_when_head_workload_is_admitted_without_a_pod_event():
    world = World()
    seed(world)
    head = world.put("pods", o.pod(c.ROLE_HEAD))
    worker = world.put("pods", o.pod(c.ROLE_WORKER))
    ctl, _ = controller(world)
    drain(ctl, world)
    assert world.get_obj("workloads", NS, wl_name(worker)) is None
    admit(world, wl_name(head))
    # Only the head's Workload changes; the worker is enqueued through it.
    world.deliver()
    drain(ctl, world)
    assert world.get_obj("workloads", NS, wl_name(worker)) is not None


def foreign_head(*, gates: list[str] | None = None, deleting: bool = False) -> dict:
    """A head raykueue never saw created: the opt-in came later, or raykueue was
    installed while the cluster ran. No label of ours, no Workload."""
    head = o.pod(c.ROLE_HEAD, gated=False, phase="Running", ready=True, deleting=deleting)
    for key in (c.MANAGED_BY_LABEL, c.QUEUE_LABEL, c.PRIORITY_CLASS_LABEL):
        head["metadata"]["labels"].pop(key)
    if gates:
        head["spec"].pop("nodeName")
        head["spec"]["schedulingGates"] = [{"name": g} for g in gates]
        head["status"] = o.pod(phase="Pending")["status"]
    return head


def test_worker_queues_behind_a_running_head_that_raykueue_did_not_create():
    """Issue 21: heads were looked for only among pods labelled ours, so these
    workers waited for a head forever."""
    world = World()
    seed(world)
    world.put("pods", foreign_head())
    worker = world.put("pods", o.pod(c.ROLE_WORKER))
    ctl, _ = controller(world)
    drain(ctl, world)
    assert world.get_obj("workloads", NS, wl_name(worker)) is not None
    assert not [x for x in world.of("workloads") if x["metadata"]["labels"].get(c.NODE_TYPE_LABEL)
                == c.ROLE_HEAD], "the foreign head gets no Workload of ours"


def test_a_foreign_head_that_starts_later_releases_the_waiting_workers():
    world = World()
    seed(world)
    worker = world.put("pods", o.pod(c.ROLE_WORKER))
    ctl, _ = controller(world)
    drain(ctl, world)
    assert world.get_obj("workloads", NS, wl_name(worker)) is None  # no head at all yet
    world.put("pods", foreign_head())
    world.deliver()  # only the head's event: it must queue the worker
    drain(ctl, world)
    assert world.get_obj("workloads", NS, wl_name(worker)) is not None


@pytest.mark.parametrize("head", [
    pytest.param(lambda: foreign_head(gates=["kueue.x-k8s.io/admission"]), id="gated-by-kueue"),
    pytest.param(lambda: foreign_head(deleting=True), id="being-deleted"),
])
def test_a_foreign_head_counts_only_once_past_every_gate_and_alive(head):
    world = World()
    seed(world)
    world.put("pods", head())
    worker = world.put("pods", o.pod(c.ROLE_WORKER))
    ctl, _ = controller(world)
    drain(ctl, world)
    assert world.get_obj("workloads", NS, wl_name(worker)) is None


def test_v1beta1_server():
    world = World(version="v1beta1")
    seed(world)
    head = world.put("pods", o.pod(c.ROLE_HEAD))
    ctl, _ = controller(world)
    drain(ctl, world)
    wl = world.get_obj("workloads", NS, wl_name(head))
    assert wl["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    assert wl["spec"]["priorityClassName"] == "ray-head"


# --- never two Workloads, never a repeated write ------------------------------------


def test_stale_cache_does_not_repeat_a_create_or_a_lift():
    world = World()
    seed(world)
    head = world.put("pods", o.pod(c.ROLE_HEAD))
    ctl, _ = controller(world)
    key = PodKey(NS, head["metadata"]["name"])
    ctl.process(ctl.queue.get(timeout=0))
    # A second pass before the watch delivered the Workload.
    ctl.queue.add(key)
    ctl.process(ctl.queue.get(timeout=0))
    assert world.writes() == [("create", "workloads")]

    world.deliver()
    admit(world, wl_name(head))
    world.deliver()
    drain(ctl, world, rounds=1)
    ctl.queue.add(key)
    ctl.process(ctl.queue.get(timeout=0))  # pod cache still shows the gate
    assert world.writes() == [("create", "workloads"), ("patch", "pods")]


def test_create_that_already_exists_is_adopted():
    world = World()
    seed(world)
    head = world.put("pods", o.pod(c.ROLE_HEAD))
    ctl, _ = controller(world)
    # A previous leader's create landed, our cache has not seen it yet.
    world.put("workloads", o.workload(head, "pending", priority=1000))
    drain(ctl, world)
    assert world.writes() == [("create", "workloads")]  # the refused attempt only
    assert len(world.of("workloads")) == 1


def test_restart_adopts_and_finishes_what_vanished():
    world = World()
    seed(world)
    running = o.pod(c.ROLE_HEAD, gated=False, phase="Running", ready=True)
    world.put("pods", running)
    world.put("workloads", o.workload(running, "admitted", pods_ready="True", priority=1000))
    waiting = o.pod(c.ROLE_WORKER)
    world.put("pods", waiting)
    world.put("workloads", o.workload(waiting, "pending"))
    gone = o.pod(c.ROLE_WORKER)  # deleted while no controller ran
    world.put("workloads", o.workload(gone, "admitted", pods_ready="True"))

    ctl, _ = controller(world)
    drain(ctl, world)
    assert ("create", "workloads") not in world.writes()
    assert world.writes() == [("apply", "workloads/status")]
    cond = w.condition(world.get_obj("workloads", NS, wl_name(gone)), w.FINISHED)
    assert cond["reason"] == a.FINISHED_OWNER_NOT_FOUND
    # The pod was confirmed gone with a GET before its quota was released.
    assert ("get", "pods") in world.calls


def test_pod_that_only_lost_our_label_keeps_its_workload():
    world = World()
    seed(world)
    pod = o.pod(c.ROLE_WORKER, gated=False, phase="Running", ready=True)
    del pod["metadata"]["labels"][c.MANAGED_BY_LABEL]
    world.put("pods", pod)
    world.put("workloads", o.workload(pod, "admitted", pods_ready="True"))
    ctl, _ = controller(world)
    drain(ctl, world)
    assert world.writes() == []


def test_workload_already_collected_is_fine():
    # No grace for the collector: our delete races it, and the collector wins.
    world, ctl, head = head_with_workload(collector_grace_seconds=0.0)
    world.delete(f"/api/v1/namespaces/{NS}/pods/{head['metadata']['name']}")
    world.deliver()
    world.collect_garbage()
    drain(ctl, world)
    assert world.writes()[-1] == ("delete", "workloads")  # answered 404: nothing to retry
    assert world.of("workloads") == []


def test_a_gone_pods_workload_is_ours_to_delete_once_the_collector_grace_ran_out():
    """The collector did not come (it lags, or is not running): the pass the grace's
    timer brings deletes the Workload, reading why the pod went from its kept last state."""
    now = [1000.0]
    world = World()
    seed(world)
    head = world.put("pods", o.pod(c.ROLE_HEAD))
    ctl = Controller(world, ControllerConfig(retry_base_seconds=0.0), None,  # type: ignore[arg-type]
                     cache_factory=world.cache_factory, clock=lambda: now[0])
    assert ctl.start(world.version, threading.Event())
    drain(ctl, world)
    admit(world, wl_name(head))
    world.deliver()
    drain(ctl, world)
    writes = len(world.writes())
    with world.unrecorded():
        world.delete(f"/api/v1/namespaces/{NS}/pods/{head['metadata']['name']}")
    world.deliver()
    drain(ctl, world)
    key = PodKey(NS, head["metadata"]["name"])
    (wait,) = ctl.reconcile(key)  # the pass before the grace ran out
    assert isinstance(wait, a.Wait) and wait.after == pytest.approx(5.0)
    assert len(world.writes()) == writes and world.get_obj("workloads", NS, wl_name(head))
    now[0] += 5.0
    (delete,) = ctl.reconcile(key)
    assert isinstance(delete, a.DeleteWorkload) and delete.reason == a.FINISHED_POD_DELETED
    assert world.writes()[writes:] == [("delete", "workloads")]
    assert world.get_obj("workloads", NS, wl_name(head)) is None
    assert ("get", "pods") not in world.calls  # the kept last state said it was deleted
    world.deliver()
    assert ctl.reconcile(key) == []
    assert ctl.state.departed((NS, head["metadata"]["name"])) is None  # forgotten once done


# --- gate lifting -----------------------------------------------------------------------


def test_lift_refused_by_a_test_op_is_retried_on_fresh_state():
    world, ctl, head = head_with_workload()
    admit(world, wl_name(head))
    # Someone added a gate in front of ours; our pod cache has not seen it.
    live = copy.deepcopy(world.get_obj("pods", NS, head["metadata"]["name"]))
    live["spec"]["schedulingGates"].insert(0, {"name": "example.com/other"})
    world.put("pods", live)
    for cache in world.caches:
        if cache.plural == "workloads":
            cache.sync()
    key = ctl.queue.get(timeout=0)
    assert not ctl.process(key)  # 422 from the test op: requeued
    world.deliver()
    drain(ctl, world)
    gates = world.get_obj("pods", NS, head["metadata"]["name"])["spec"]["schedulingGates"]
    assert gates == [{"name": "example.com/other"}]


def test_gate_lift_metrics():
    world, ctl, head = head_with_workload()
    before_age = counter("raykueue_gate_age_seconds_count", role="head")
    before_lat = counter("raykueue_admitted_to_gate_lifted_seconds_count")
    before_writes = counter("raykueue_api_writes_total", verb="patch", resource="pods")
    admit(world, wl_name(head))
    world.deliver()
    drain(ctl, world)
    assert counter("raykueue_gate_age_seconds_count", role="head") == before_age + 1
    assert counter("raykueue_admitted_to_gate_lifted_seconds_count") == before_lat + 1
    assert counter("raykueue_api_writes_total", verb="patch", resource="pods") == \
        before_writes + 1


def test_gated_gauge_counts_by_role():
    world = World()
    seed(world)
    world.put("pods", o.pod(c.ROLE_HEAD))
    world.put("pods", o.pod(c.ROLE_WORKER))
    world.put("pods", o.pod(c.ROLE_WORKER))
    world.put("pods", o.pod(c.ROLE_WORKER, gated=False, phase="Running"))
    controller(world)
    assert counter("raykueue_gated_pods", role="head") == 1
    assert counter("raykueue_gated_pods", role="worker") == 2


def test_node_selector_conflict_is_reported_on_pod_and_workload_once():
    world = World()
    seed(world)
    head = world.put("pods", o.pod(c.ROLE_HEAD, node_selector={"pool": "h100"}))
    ctl, recorder = controller(world)
    drain(ctl, world)
    admit(world, wl_name(head))
    world.deliver()
    drain(ctl, world)
    ctl.queue.add(PodKey(NS, head["metadata"]["name"]))
    drain(ctl, world)
    assert [(kind, reason) for kind, _, reason, _ in recorder.events] == [
        ("Pod", a.CONFLICT_NODE_SELECTOR), ("Workload", a.CONFLICT_NODE_SELECTOR)]
    gates = world.get_obj("pods", NS, head["metadata"]["name"])["spec"]["schedulingGates"]
    assert gates == [{"name": c.GATE}]
    assert list(ctl.conflicts()) == [f"{NS}/{head['metadata']['name']}"]


# --- eviction --------------------------------------------------------------------------------


def test_eviction_condition_event_delete_then_finish(caplog):
    world = World()
    seed(world)
    head = world.put("pods", o.pod(c.ROLE_HEAD, gated=False, phase="Running", ready=True))
    world.put("workloads", o.workload(head, "admitted", pods_ready="True", priority=1000))
    worker = world.put("pods", o.pod(c.ROLE_WORKER, gated=False, phase="Running", ready=True))
    world.put("workloads", o.workload(worker, "admitted", pods_ready="True"))
    ctl, recorder = controller(world)
    drain(ctl, world)
    assert world.writes() == []

    evict(world, wl_name(worker))
    world.deliver()
    seen: list[tuple[str, str]] = []
    original = world.apply

    def spy(path, body, field_manager, force=True, **kw):
        if "/pods/" in path:
            seen.append((body["status"]["conditions"][0]["type"],
                         body["status"]["conditions"][0]["reason"]))
        return original(path, body, field_manager, force, **kw)

    world.apply = spy  # type: ignore[method-assign]
    drain(ctl, world)
    assert world.writes() == [("apply", "pods/status"), ("delete", "pods"),
                              ("apply", "workloads/status")]
    assert seen == [(c.EVICTED_CONDITION, "Preempted")]
    # Issue 28: the same Event on the pod and on its RayCluster, with the evidence.
    assert [(kind, reason) for kind, _, reason, _ in recorder.events] == [
        ("Pod", "Evicted"), ("RayCluster", "Evicted")]
    assert all("Evidence (KueueEvicted)" in e[3] for e in recorder.events)
    assert world.get_obj("pods", NS, worker["metadata"]["name"]) is None
    cond = w.condition(world.get_obj("workloads", NS, wl_name(worker)), w.FINISHED)
    assert cond["reason"] == a.FINISHED_EVICTED

    caplog.set_level(logging.WARNING, logger="raykueue.controller")
    evict(world, wl_name(head))
    world.deliver()
    drain(ctl, world)
    assert any("taken down" in r.getMessage() for r in caplog.records)


def test_evicted_pod_replaced_by_a_namesake_is_not_deleted():
    world = World()
    seed(world)
    pod = world.put("pods", o.pod(c.ROLE_HEAD, gated=False, phase="Running", ready=True))
    world.put("workloads", o.workload(pod, "admitted", priority=1000))
    ctl, _ = controller(world)
    drain(ctl, world)
    evict(world, wl_name(pod))
    world.deliver()
    world.fail_next["delete"] = ApiError(409, "Conflict", {"message": "Precondition failed"})
    drain(ctl, world)
    assert ("apply", "workloads/status") in world.writes()  # still finished


# --- overlap ---------------------------------------------------------------------------------


def test_kueue_managed_pod_is_left_alone_and_reported_once():
    world = World()
    seed(world)
    pod = o.pod(c.ROLE_HEAD)
    pod["spec"]["schedulingGates"].append({"name": c.KUEUE_POD_GATE})
    pod = world.put("pods", pod)
    before = counter("raykueue_conflicts_total", kind=a.CONFLICT_KUEUE_POD)
    ctl, recorder = controller(world)
    drain(ctl, world)
    ctl.queue.add(PodKey(NS, pod["metadata"]["name"]))
    drain(ctl, world)
    assert world.writes() == []
    assert len(recorder.events) == 1
    assert counter("raykueue_conflicts_total", kind=a.CONFLICT_KUEUE_POD) == before + 1
    summary = ctl.conflicts()
    assert c.KUEUE_POD_GATE in summary[f"{NS}/{pod['metadata']['name']}"]

    # Resolved (the pod goes): the summary forgets it.
    world.remove("pods", NS, pod["metadata"]["name"])
    world.deliver()
    drain(ctl, world)
    assert ctl.conflicts() == {}


def test_kueue_created_workload_for_our_pod_is_a_conflict():
    world = World()
    seed(world)
    pod = world.put("pods", o.pod(c.ROLE_HEAD))
    world.put("workloads", o.workload(pod, "pending", ours=False))
    ctl, _ = controller(world)
    drain(ctl, world)
    assert world.writes() == []
    assert a.CONFLICT_KUEUE_WORKLOAD in ctl.conflicts()[f"{NS}/{pod['metadata']['name']}"]


# --- problems that need a human ----------------------------------------------------------


def test_missing_priority_class_warns_once_and_queues_when_created():
    world = World()
    world.put("resourceflavors", o.flavor())
    head = world.put("pods", o.pod(c.ROLE_HEAD))
    ctl, recorder = controller(world)
    drain(ctl, world)
    ctl.queue.add(PodKey(NS, head["metadata"]["name"]))
    drain(ctl, world)
    assert [reason for _, _, reason, _ in recorder.events] == [a.WARN_PRIORITY_CLASS]
    assert world.of("workloads") == []
    world.put("workloadpriorityclasses", o.priority_class("ray-head", 1000))
    world.deliver()
    drain(ctl, world)
    assert world.get_obj("workloads", NS, wl_name(head))["spec"]["priority"] == 1000


def test_transient_errors_are_retried():
    world = World()
    seed(world)
    head = world.put("pods", o.pod(c.ROLE_HEAD))
    ctl, _ = controller(world)
    world.fail_next["create"] = ApiError(503, "ServiceUnavailable", {"message": "try later"})
    drain(ctl, world)
    assert world.writes() == [("create", "workloads"), ("create", "workloads")]
    assert world.get_obj("workloads", NS, wl_name(head)) is not None


# --- run() ----------------------------------------------------------------------------------------


def test_run_discovers_version_and_stops_on_the_event():
    world = World(version="v1beta1")
    seed(world)
    world.put("pods", o.pod(c.ROLE_HEAD))
    ctl = Controller(world, ControllerConfig(workers=2, resync_seconds=0.05),  # type: ignore[arg-type]
                     None, cache_factory=world.cache_factory)
    stop = threading.Event()
    thread = threading.Thread(target=ctl.run, args=(stop,), daemon=True)
    thread.start()
    wait_for(lambda: world.of("workloads"), timeout=within(1), message="the head's Workload")
    stop.set()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert ctl.version == "v1beta1"
    assert len(world.of("workloads")) == 1
    assert not ctl.synced


def test_workload_orphaned_by_its_pods_deletion_is_finished():
    """`kubectl delete pod --cascade=orphan`: the collector strips the owner
    reference instead of deleting the Workload, which would hold quota forever."""
    world = World()
    seed(world)
    gone = o.pod(c.ROLE_WORKER)
    orphan = o.workload(gone, "admitted")
    orphan["metadata"]["ownerReferences"] = []
    world.put("workloads", orphan)
    ctl, _ = controller(world)
    drain(ctl, world)
    cond = w.condition(world.get_obj("workloads", NS, wl_name(gone)), w.FINISHED)
    assert cond["reason"] == a.FINISHED_OWNER_NOT_FOUND


def test_workload_whose_owner_reference_was_removed_by_hand_stays_the_pods():
    world = World()
    seed(world)
    pod = world.put("pods", o.pod(c.ROLE_WORKER, gated=False, phase="Running", ready=True))
    wl = o.workload(pod, "admitted", pods_ready="True")
    wl["metadata"]["ownerReferences"] = []
    world.put("workloads", wl)
    ctl, _ = controller(world)
    drain(ctl, world)
    assert world.writes() == []  # neither finished as an orphan nor duplicated


def test_pod_losing_our_label_while_watched_keeps_its_workload():
    world = World()
    seed(world)
    pod = world.put("pods", o.pod(c.ROLE_WORKER, gated=False, phase="Running", ready=True))
    world.put("workloads", o.workload(pod, "admitted", pods_ready="True"))
    ctl, _ = controller(world)
    drain(ctl, world)
    relabelled = copy.deepcopy(world.get_obj("pods", NS, pod["metadata"]["name"]))
    del relabelled["metadata"]["labels"][c.MANAGED_BY_LABEL]
    world.put("pods", relabelled)
    world.deliver()  # the watch reports it DELETED: it no longer matches our selector
    drain(ctl, world)
    assert world.writes() == []


# --- the Reader asks the API server only what the caches cannot say ----------------------


def test_pod_deleted_while_watched_needs_no_live_check():
    world, ctl, head = running_head(collector_grace_seconds=0.0)
    with world.unrecorded():
        world.delete(f"/api/v1/namespaces/{NS}/pods/{head['metadata']['name']}")
    world.deliver()
    drain(ctl, world)
    assert world.get_obj("workloads", NS, wl_name(head)) is None
    assert ("get", "pods") not in world.calls  # its last state said it was deleted


def test_orphaned_workload_needs_no_live_check():
    world = World()
    seed(world)
    orphan = o.workload(o.pod(c.ROLE_WORKER), "admitted")
    orphan["metadata"]["ownerReferences"] = []
    world.put("workloads", orphan)
    ctl, _ = controller(world)
    drain(ctl, world)
    assert world.writes() == [("apply", "workloads/status")]
    assert ("get", "pods") not in world.calls  # the pod cache answers for orphans


def test_live_check_that_fails_is_retried():
    world = World()
    seed(world)
    gone = o.pod(c.ROLE_WORKER)
    world.put("workloads", o.workload(gone, "admitted"))
    ctl, _ = controller(world)
    world.fail_next["get"] = ApiError(503, "ServiceUnavailable", {"message": "try later"})
    key = ctl.queue.get(timeout=0)
    assert not ctl.process(key)  # nothing finished on a guess
    assert world.writes() == []
    drain(ctl, world)
    cond = w.condition(world.get_obj("workloads", NS, wl_name(gone)), w.FINISHED)
    assert cond["reason"] == a.FINISHED_OWNER_NOT_FOUND
