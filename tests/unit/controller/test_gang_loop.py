"""A gang cluster through the whole controller (reader, state, decide, handlers) against
the in-memory API server, with the watch delivering when the test says so."""

from __future__ import annotations

import copy
import json
from typing import Any

from raykueue.controller import actions as a
from raykueue.controller import workload as w
from raykueue.controller.gang import base as gb
from raykueue.core import contract as c
from testkit import controller_objects as o
from testkit.controller_world import World
from testkit.unit.controller_loop import NS, controller, counter, drain, run_pod, seed

GROUP = "gpu-group"
SECOND = "2026-12-02T09:40:12Z"  # every pod of the cluster is made in this one second


def gang_pod(role: str, uid: str) -> dict[str, Any]:
    pod = o.pod(role, uid=uid)
    pod["metadata"]["labels"][c.GANG_LABEL] = "raycluster-gpu"
    pod["metadata"]["annotations"] = {c.GANG_MIN_ANNOTATION: json.dumps({GROUP: 2})}
    pod["metadata"]["creationTimestamp"] = SECOND
    return pod


def admit_base(world: World) -> dict[str, Any]:
    (base,) = [x for x in world.of("workloads") if gb.is_base(x)]
    base = copy.deepcopy(base)
    base["status"] = {"admission": {"clusterQueue": o.CQ, "podSetAssignments": [
        {"name": ps["name"], "count": ps["count"], "flavors": {"cpu": o.FLAVOR}}
        for ps in base["spec"]["podSets"]]}, "conditions": [
        {"type": w.QUOTA_RESERVED, "status": "True", "reason": "QuotaReserved", "message": "",
         "lastTransitionTime": o.T1},
        {"type": w.ADMITTED, "status": "True", "reason": "Admitted", "message": "",
         "lastTransitionTime": o.T1}]}
    return world.put("workloads", base)


def gated(world: World, pod: dict[str, Any]) -> bool:
    live = world.get_obj("pods", NS, pod["metadata"]["name"])
    return live is not None and c.GATE in [g["name"] for g in live["spec"].get("schedulingGates", [])]


def started_gang() -> tuple[World, Any, list[dict[str, Any]]]:
    """Head and two base workers, released under an admitted base and running."""
    world = World()
    seed(world)
    pods = [world.put("pods", gang_pod(c.ROLE_HEAD, "00000000-0000-4000-8000-00000000000e")),
            world.put("pods", gang_pod(c.ROLE_WORKER, "00000000-0000-4000-8000-00000000000c")),
            world.put("pods", gang_pod(c.ROLE_WORKER, "00000000-0000-4000-8000-00000000000d"))]
    ctl, recorder = controller(world)
    drain(ctl, world)
    admit_base(world)
    drain(ctl, world)
    for pod in pods:
        assert not gated(world, pod)
        run_pod(world, pod)
    drain(ctl, world)
    return world, (ctl, recorder), pods


def test_a_worker_seen_after_its_base_in_the_same_second_queues_on_its_own() -> None:
    """The double fill as it was seen on the stack: a worker of the base pods' second,
    seen after they were released, whose uid sorts first, was released under the base
    too (and the base worker it displaced ran on, skipped)."""
    world, (ctl, _), pods = started_gang()
    late = world.put("pods", gang_pod(c.ROLE_WORKER, "00000000-0000-4000-8000-000000000001"))
    drain(ctl, world)
    assert gated(world, late)
    own = world.get_obj("workloads", NS, w.workload_name(late))
    assert own is not None and own["metadata"]["ownerReferences"][0]["uid"] == p_uid(late)
    assert [x for x in pods if gated(world, x)] == []


def test_a_pod_past_the_gate_with_no_slot_is_reported_on_it_and_its_raycluster_not_killed() -> None:
    """Such a pod used to be deleted. Nothing proves it must go (no Workload of
    its own that Kueue evicted or left unadmitted): it is kept, and said so once, on the
    pod and on its RayCluster, and counted."""
    world, (ctl, recorder), _ = started_gang()
    before = counter("raykueue_pod_removals_total", cause=a.GANG_UNCOVERED, outcome="not_proven")
    deleted = counter("raykueue_pods_evicted_total", role="worker", reason=a.GANG_UNCOVERED)
    intruder = gang_pod(c.ROLE_WORKER, "00000000-0000-4000-8000-0000000000ff")
    intruder["spec"].pop("schedulingGates")  # past the gate without raykueue
    world.put("pods", intruder)
    drain(ctl, world)
    assert world.get_obj("pods", NS, intruder["metadata"]["name"]) is not None
    assert ("delete", "pods") not in world.writes()
    name = intruder["metadata"]["name"]
    told = [(e[0], e[2]) for e in recorder.events if name in (e[1], e[3].split(":")[0][4:])]
    assert told == [("Pod", "RemovalNotProven"), ("RayCluster", "RemovalNotProven")], told
    assert counter("raykueue_pod_removals_total", cause=a.GANG_UNCOVERED,
                   outcome="not_proven") >= before + 1
    assert counter("raykueue_pods_evicted_total", role="worker",
                   reason=a.GANG_UNCOVERED) == deleted
    # The base pods stay, released.
    assert len([x for x in world.of("pods") if not gated(world, x)]) == 4


def p_uid(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["uid"])


def test_the_handlers_hold_each_pod_the_gangs_pass_puts_in_the_base_until_it_goes() -> None:
    """The gate lift of the gang's pass records the pod in its slot (a later pass on a
    pod cache behind that write still counts it there), and the pod's deletion seen by
    the watch frees the slot."""
    world, (ctl, _), pods = started_gang()
    groups = {p_uid(pods[0]): "head", p_uid(pods[1]): GROUP, p_uid(pods[2]): GROUP}
    assert ctl.state.gang_released(NS, "raycluster-gpu") == groups
    world.remove("pods", NS, pods[2]["metadata"]["name"])
    drain(ctl, world)
    assert p_uid(pods[2]) not in ctl.state.gang_released(NS, "raycluster-gpu")
