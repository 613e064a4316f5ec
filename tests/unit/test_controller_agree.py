"""`decide`, the stuck-gate report and `raykueue explain` agree on a pod.

A pod whose only Workload of ours is a duplicate (not the deterministic name):
`decide` finishes it and creates the pod's own, so the pod has no Workload that
Kueue could admit for it; the report and `explain` must say the same.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from raykueue.controller import actions as a
from raykueue.controller import decide as d
from raykueue.controller import stuck
from raykueue.controller.explain import explain_pod
from raykueue.core import contract as c
from tests.unit import controller_objects as o
from tests.unit.controller_world import World

pytestmark = pytest.mark.unit

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


@pytest.mark.xfail(strict=True, reason="stuck._current counts any live Workload of ours")
def test_the_stuck_report_does_not_count_a_duplicate_as_waiting_for_quota() -> None:
    head, duplicate = with_duplicate()
    (item,) = stuck.gated([head], [duplicate], NOW, head_first=True)
    assert item.reason == stuck.NO_WORKLOAD


@pytest.mark.xfail(strict=True, reason="explain shows the first Workload of ours it finds")
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
