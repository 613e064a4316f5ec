"""`decide`, the stuck-gate report and `raykueue explain` agree on a pod.

A pod whose only Workload of ours is a duplicate (not the deterministic name):
`decide` finishes it and creates the pod's own, so the pod has no Workload that
Kueue could admit for it; the report and `explain` must say the same.
"""

from __future__ import annotations

from datetime import datetime

from raykueue.controller import actions as a
from raykueue.controller import decide as d
from raykueue.controller import stuck
from raykueue.controller import verdict as v
from raykueue.controller.explain import explain_pod
from raykueue.controller.keys import PodKey
from raykueue.core import contract as c
from testkit import controller_objects as o
from testkit.controller_world import World
from testkit.listsource import facts_of

NOW = datetime.fromisoformat(o.T0.replace("Z", "+00:00")).timestamp() + 300.0
PRIORITIES = {c.DEFAULT_HEAD_PRIORITY_CLASS: 1000, c.DEFAULT_WORKER_PRIORITY_CLASS: 100}


def with_duplicate() -> tuple[dict, dict]:
    head = o.pod(c.ROLE_HEAD, name="head")
    duplicate = o.workload(head, "pending", priority=1000)
    duplicate["metadata"]["name"] = "head-by-hand"
    return head, duplicate


def test_decide_finishes_a_duplicate_and_creates_the_pods_own() -> None:
    head, duplicate = with_duplicate()
    actions = d.decide(head, [duplicate], d.Context(priority_values=PRIORITIES))
    assert [type(x) for x in actions] == [a.FinishWorkload, a.CreateWorkload]
    assert actions[0].workload == "head-by-hand"


def test_the_stuck_report_does_not_count_a_duplicate_as_waiting_for_quota() -> None:
    head, duplicate = with_duplicate()
    (item,) = stuck.gated([head], facts_of([head], [duplicate], priority_values=PRIORITIES), NOW)
    assert item.reason == v.NO_WORKLOAD
    assert item.why().startswith("creating its Workload has not succeeded yet")


def test_explain_does_not_show_a_duplicate_as_the_pods_workload() -> None:
    world = World()
    for name, value in PRIORITIES.items():
        world.put("workloadpriorityclasses", o.priority_class(name, value))
    head, duplicate = with_duplicate()
    world.put("pods", head)
    world.put("workloads", duplicate)
    text = explain_pod(world, "team-a", "head")  # type: ignore[arg-type]
    assert "Workload:   none" in text
    assert "no Workload yet" in text
    assert "duplicates: head-by-hand" in text


def test_a_worker_waits_for_a_head_whose_only_admitted_workload_is_a_duplicate() -> None:
    """Head-first judges the head by its own Workload, as decide does for the head."""
    head, duplicate = with_duplicate()
    duplicate = o.workload(head, "admitted", priority=1000)
    duplicate["metadata"]["name"] = "head-by-hand"
    worker = o.pod(c.ROLE_WORKER, name="worker")
    pods = [head, worker]
    facts = facts_of(pods, [duplicate], priority_values=PRIORITIES)
    assert not facts(worker).ctx.head_admitted
    assert {p["metadata"]["name"]: x.reason for x in stuck.gated(pods, facts, NOW)
            for p in [x.pod]} == {"head": v.NO_WORKLOAD, "worker": v.WAITING_FOR_HEAD}
    own = o.workload(head, "admitted", priority=1000)
    assert facts_of(pods, [duplicate, own], priority_values=PRIORITIES)(worker).ctx.head_admitted


def test_explain_and_the_report_share_one_verdict() -> None:
    """For each kind of gated pod: explain's verdict line is the report's sentence
    (but where the controller speaks of its own retries)."""
    world = World()
    for name, value in PRIORITIES.items():
        world.put("workloadpriorityclasses", o.priority_class(name, value))
    head = world.put("pods", o.pod(c.ROLE_HEAD, name="head"))
    world.put("workloads", o.workload(head, "pending", priority=1000))
    worker = world.put("pods", o.pod(c.ROLE_WORKER, name="worker"))
    orphan = world.put("pods", o.pod(c.ROLE_WORKER, name="lone", cluster="lone", queue=None))
    pods = [head, worker, orphan]
    report = {x.pod["metadata"]["name"]: x for x in stuck.gated(
        pods, facts_of(pods, world.of("workloads"), priority_values=PRIORITIES), NOW)}
    assert {k: x.reason for k, x in report.items()} == {
        "head": v.WAITING_FOR_QUOTA, "worker": v.WAITING_FOR_HEAD, "lone": v.WAITING_FOR_HEAD}
    for name, item in report.items():
        text = explain_pod(world, "team-a", name)  # type: ignore[arg-type]
        assert f"verdict:    {item.why()}" in text, name


def test_explain_does_not_call_a_gang_base_stale() -> None:
    """The base of a gang names no pod: explain shows it, its verdict ignores it."""
    from testkit.unit.controller_gang_decide import base_for, cluster

    world = World()
    world.put("workloadpriorityclasses", o.priority_class("ray-head", 1000))
    pods = [world.put("pods", x) for x in cluster(2)]
    base = world.put("workloads", base_for(cluster(2), "pending"))
    text = explain_pod(world, "team-a", pods[1]["metadata"]["name"])  # type: ignore[arg-type]
    assert f"Workload:   {base['metadata']['name']}" in text
    assert "no longer exists" not in text
    assert "verdict:    waiting: gang raycluster-gpu: decided per cluster" in text


def test_the_report_reads_the_facts_the_controllers_pass_reads() -> None:
    from testkit.unit.controller_loop import controller, seed

    world = World()
    seed(world)
    head, duplicate = with_duplicate()
    world.put("pods", head)
    world.put("workloads", duplicate)
    ctl, _ = controller(world)
    reader = ctl._reader
    assert reader is not None and ctl.caches is not None
    assert reader.read(PodKey("team-a", "head")) == reader.facts(ctl.caches.pods.get("team-a", "head"))
    (item,) = stuck.gated(ctl.caches.pods.list(), reader.facts, NOW)
    assert item.reason == v.NO_WORKLOAD
