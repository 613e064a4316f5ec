"""A gang cluster's life past its start, on the stack: head lost, base evicted, a slot handed back.

Each scenario runs under `GangWatch` (invariants.GangInvariants), whose invariants
every wait checks: never a pod past the gate without a Workload holding quota
covering it, never the ClusterQueue over nominal, never an extra running on after
its base is preempted unless Kueue left its own Workload admitted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

import devstack
from devstack.components import COMPONENTS, kueue_dir
from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.kube.resources import PODS
from testkit.e2e.controller import (  # noqa: F401 - fixtures
    RAYCLUSTERS,
    WPCS,
    admin,
    controller,
    queue,
    webhooks,
)
from testkit.e2e.gang import (
    GangWatch,
    base_of,
    cq_cpu_reaches_held,
    own_workload_pods,
    started,
    until,
)
from testkit.e2e.gang_lifecycle import uids, with_extras
from testkit.e2e.kueue_shipped import kueue_as_shipped, watched  # noqa: F401 - fixtures
from testkit.invariants import WORKLOADS
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture
from testkit.waiting import wait_for


def test_head_lost_is_replaced_in_the_base_and_no_worker_is_killed(admin, controller, queue):  # noqa: F811
    """The head pod deleted: KubeRay recreates it. Issue 28: a lost head proves nothing
    against its workers (only Kueue's eviction of a pod's own Workload, or a pod left
    outside quota, does), so the gang is not requeued by killing them: the proposal is
    reported, every worker and the extra run on, the base keeps their quota, and the new
    head takes the head's slot in it."""
    ns = queue(cpu="10", memory="10Gi")
    with watched(admin, ns), GangWatch(admin, ns) as gw:
        admin.create(RAYCLUSTERS.path(ns), with_extras("a", 2, 3))
        until(gw, lambda: len(started(admin, ns, "a")) == 4 and len(own_workload_pods(admin, ns)) == 1,
              timeout=120, message="a: head, 2 base workers and an extra running")
        first = base_of(admin, ns, "a")
        head = next(p for p in started(admin, ns, "a")
                    if p["metadata"]["labels"][c.NODE_TYPE_LABEL] == c.ROLE_HEAD)
        workers = uids(started(admin, ns, "a")) - {head["metadata"]["uid"]}
        admin.delete(PODS.path(ns, head["metadata"]["name"]))

        def again() -> bool:
            base = base_of(admin, ns, "a")
            now = started(admin, ns, "a")
            return (base is not None and base["metadata"]["uid"] == first["metadata"]["uid"]
                    and w.is_admitted(base) and len(now) == 4
                    and uids(now) - workers != {head["metadata"]["uid"]}
                    and workers <= uids(now) and len(own_workload_pods(admin, ns)) == 1)

        until(gw, again, timeout=180, message="a runs on: a new head in the same base, "
                                              "every worker the same pod")
        gw.assert_held()


def test_base_preempted_goes_whole_an_extra_kueue_left_admitted_runs_on(admin, controller, queue):  # noqa: F811
    """b's base outranks a's; Kueue takes a's base (it may leave a's extra, adding back what b
    does not need): every pod of a's base goes (Kueue evicted their Workload, the base), a's
    base waits whole and starts whole once b goes. Issue 28: an extra whose own Workload
    Kueue left admitted is within quota by Kueue's own count, and its removal is not
    proven: it runs on; one whose Workload Kueue evicted too goes."""
    ns = queue(cpu="2", memory="2Gi", preemption=True)  # a: base of 3 + an extra; b: base of 3
    urgent = f"e2e-urgent-{ns}"
    admin.create(WPCS.path(), {"apiVersion": WPCS.api_version, "kind": "WorkloadPriorityClass",
                               "metadata": {"name": urgent}, "value": 5000,
                               "description": "outranks ray-head"})
    try:
        with watched(admin, ns), GangWatch(admin, ns) as gw:
            admin.create(RAYCLUSTERS.path(ns), with_extras("a", 2, 3))
            until(gw, lambda: len(started(admin, ns, "a")) == 4 and len(own_workload_pods(admin, ns)) == 1,
                  timeout=120, message="a: head, 2 base workers and an extra running")
            a_base = base_of(admin, ns, "a")
            (extra_uid,) = own_workload_pods(admin, ns)
            extra = next(p for p in started(admin, ns, "a") if p["metadata"]["uid"] == extra_uid)
            b = with_extras("b", 2, 2)
            b["spec"]["headGroupSpec"]["template"].setdefault("metadata", {})["labels"] = {
                c.PRIORITY_CLASS_LABEL: urgent}
            admin.create(RAYCLUSTERS.path(ns), b)

            def only_admitted_extras_of_a() -> bool:
                left = started(admin, ns, "a")
                if uids(left) - {extra_uid}:
                    return False
                own = admin.get(WORKLOADS.path(ns, w.workload_name(extra))) if left else None
                return not left or (own is not None and w.is_admitted(own))

            until(gw, lambda: len(started(admin, ns, "b")) == 3 and only_admitted_extras_of_a(),
                  timeout=120, message="b started whole; of a, at most its extra Kueue left admitted")
            assert gw.evicted_bases.get(a_base["metadata"]["uid"]) == "Preempted"
            waiting = base_of(admin, ns, "a")
            assert waiting is not None and not w.is_quota_reserved(waiting)

            admin.delete(RAYCLUSTERS.path(ns, "b"))
            until(gw, lambda: len(started(admin, ns, "a")) == 4 and len(own_workload_pods(admin, ns)) == 1,
                  timeout=180, message="a started whole again once b was gone")
            gw.assert_held()
    finally:
        admin.delete(WPCS.path(None, urgent))


# Kueue as shipped evicts a Workload whose pods are not Ready waitForPodsReady.timeout after
# admission: 30 minutes by default (apis/config/v1beta2/defaults.go), far beyond a test. This
# restarts the stack's Kueue with that one field at 15 s (everything else as shipped) for the
# test, and restores it after.
PODS_READY_TIMEOUT = "15s"


def restart_kueue(stack: devstack.Stack) -> None:
    devstack.stack.restart_component(stack, "kueue")
    wait_for(lambda: COMPONENTS["kueue"].ready(stack)[0], timeout=120, message="Kueue ready again")


@pytest.fixture
def kueue_pods_ready_timeout(e2e_stack) -> Iterator[None]:
    path = kueue_dir(e2e_stack.config) / "config.yaml"
    shipped = path.read_text()
    config = yaml.safe_load(shipped)
    config["waitForPodsReady"] = {**(config.get("waitForPodsReady") or {}),
                                  "timeout": PODS_READY_TIMEOUT}
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    try:
        restart_kueue(e2e_stack)
        yield
    finally:
        path.write_text(shipped)
        restart_kueue(e2e_stack)


def test_base_evicted_by_wait_for_pods_ready_is_requeued_whole(
        admin, controller, queue, kueue_pods_ready_timeout):  # noqa: F811
    """Pods that never become Ready (no node takes them): PodsReady never comes, Kueue evicts the
    base after the timeout, and the gang goes back to its start, every pod recreated gated."""
    ns = queue(cpu="10", memory="10Gi")
    with watched(admin, ns), GangWatch(admin, ns) as gw:
        obj = with_extras("a", 2, 2)
        for template in (obj["spec"]["headGroupSpec"]["template"],
                         obj["spec"]["workerGroupSpecs"][0]["template"]):
            template["spec"]["nodeSelector"] = {"e2e.raykueue.io/nowhere": "true"}
        admin.create(RAYCLUSTERS.path(ns), obj)
        def ungated() -> list[dict[str, Any]]:
            return [p for p in admin.get(PODS.path(ns))["items"]
                    if not p["spec"].get("schedulingGates") and not p["metadata"].get("deletionTimestamp")]

        until(gw, lambda: len(ungated()) == 3, timeout=120, message="a's base admitted, its pods released")
        first = base_of(admin, ns, "a")
        released = uids(ungated())

        def requeued() -> bool:
            base = base_of(admin, ns, "a")
            now = uids(admin.get(PODS.path(ns))["items"])
            return (base is not None and base["metadata"]["uid"] != first["metadata"]["uid"]
                    and not now & released)

        until(gw, requeued, timeout=120, message="a requeued whole after the PodsReady timeout")
        assert gw.evicted_bases.get(first["metadata"]["uid"]) == "PodsReadyTimeout"
        gw.assert_held()


def test_a_base_worker_deleted_while_an_extra_runs_hands_its_slot_back(admin, controller, queue):  # noqa: F811
    """The reclaim path: a base worker goes (the autoscaler's way: replicas and minReplicas
    down, the victim named) while an extra of another group runs, so none can move in: the
    slot goes back through reclaimablePods and Kueue frees its quota, nothing else moves."""
    ns = queue(cpu="2", memory="2Gi")
    with watched(admin, ns), GangWatch(admin, ns) as gw:
        obj = with_extras("a", 2, 2)
        aux = dict(obj["spec"]["workerGroupSpecs"][0], groupName="aux", minReplicas=0, replicas=1)
        obj["spec"]["workerGroupSpecs"].append(aux)
        admin.create(RAYCLUSTERS.path(ns), obj)
        until(gw, lambda: len(started(admin, ns, "a")) == 4 and len(own_workload_pods(admin, ns)) == 1,
              timeout=120, message="a: head, 2 base workers and an extra of group aux running")
        cq_cpu_reaches_held(gw, admin, ns, 2000)
        base = base_of(admin, ns, "a")
        extra = own_workload_pods(admin, ns)
        victim = next(p["metadata"]["name"] for p in started(admin, ns, "a")
                      if p["metadata"]["labels"].get(c.GROUP_LABEL) == "cpu")
        groups = [dict(obj["spec"]["workerGroupSpecs"][0], minReplicas=1, replicas=1,
                       scaleStrategy={"workersToDelete": [victim]}), aux]
        created = controller.metric_total("raykueue_workloads_created_total")
        admin.merge_patch(RAYCLUSTERS.path(ns, "a"), {"spec": {"workerGroupSpecs": groups}})

        def handed_back() -> bool:
            now = base_of(admin, ns, "a")
            return (now is not None and len(started(admin, ns, "a")) == 3
                    and (now.get("status") or {}).get("reclaimablePods") == [{"name": "cpu", "count": 1}])

        until(gw, handed_back, timeout=120, message="the victim gone, its slot handed back")
        cq_cpu_reaches_held(gw, admin, ns, 1500)
        after = base_of(admin, ns, "a")
        assert after["metadata"]["uid"] == base["metadata"]["uid"] and w.is_admitted(after)
        assert own_workload_pods(admin, ns) == extra and extra <= uids(started(admin, ns, "a"))
        assert not [x for x in admin.get(WORKLOADS.path(ns))["items"] if w.is_evicted(x)]
        # The victim is never planned on: no base worker moved out on its account.
        assert controller.metric_total("raykueue_workloads_created_total") == created
        gw.assert_held()


def test_a_base_worker_deleted_by_hand_while_extras_run_is_replaced_within_quota(
        admin, controller, queue):  # noqa: F811
    """A base worker deleted by hand (replicas unchanged, so KubeRay recreates it) while
    extras of its group run: an extra moves into the vacancy, or the replacement is
    released into it, whichever the controller sees first; never both, and the quota
    held stays what runs."""
    ns = queue(cpu="3", memory="3Gi")  # 6 pods; a runs 5 (base of 3, 2 extras)
    with watched(admin, ns), GangWatch(admin, ns) as gw:
        admin.create(RAYCLUSTERS.path(ns), with_extras("a", 2, 4))
        until(gw, lambda: len(started(admin, ns, "a")) == 5 and len(own_workload_pods(admin, ns)) == 2,
              timeout=120, message="a: head, 2 base workers and 2 extras running")
        base = base_of(admin, ns, "a")
        extras = own_workload_pods(admin, ns)
        victim = next(p for p in started(admin, ns, "a") if p["metadata"]["uid"] not in extras
                      and p["metadata"]["labels"][c.NODE_TYPE_LABEL] == c.ROLE_WORKER)
        admin.delete(PODS.path(ns, victim["metadata"]["name"]))

        def replaced() -> bool:
            now = started(admin, ns, "a")
            return (len(now) == 5 and victim["metadata"]["uid"] not in uids(now)
                    and not [p for p in admin.get(PODS.path(ns))["items"]
                             if p["spec"].get("schedulingGates")])

        until(gw, replaced, timeout=120, message="the victim replaced, five pods running")
        cq_cpu_reaches_held(gw, admin, ns, 2500)
        after = base_of(admin, ns, "a")
        assert after["metadata"]["uid"] == base["metadata"]["uid"]
        assert not (after.get("status") or {}).get("reclaimablePods")
        # An extra moved in and the replacement queued as one, or the replacement filled it.
        assert len(own_workload_pods(admin, ns)) == 2
        gw.assert_held()
