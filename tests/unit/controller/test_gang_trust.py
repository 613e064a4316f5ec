"""Only the base raykueue would make for a gang may release its pods.

The base's name follows from the RayCluster's uid, which anyone who can read the
cluster knows, so whoever may create or edit Workloads can put one there, and
Kueue admits it. As with a pod's own Workload (test_controller_trust.py), what
matters is what Kueue charges: owner, queue, priority class, the head podSet, what
each released pod requests, no partial admission. A base that differs is reported
and deleted (and made again); pods released under one go with it.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from raykueue.controller import actions as a
from raykueue.controller.caches import slim_workload
from raykueue.controller.gang import base as gb
from raykueue.controller.gang import decide as gd
from raykueue.core import contract as c
from testkit.unit.controller_gang_decide import CTX, GROUP, base_for, cluster, kinds


def container(pod_set: dict[str, Any]) -> dict[str, Any]:
    return pod_set["template"]["spec"]["containers"][0]


def edit(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    forged = copy.deepcopy(base)
    target = forged
    *parents, leaf = path.split(".")
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target[key]
    target[leaf] = value
    return forged


def test_our_own_base_whole_or_slimmed_is_trusted() -> None:
    pods = cluster(3, gated=False, phase="Running", ready=True)
    base = base_for(pods, "admitted")
    for shape in (base, slim_workload(copy.deepcopy(base))):
        assert gb.mismatch(shape, pods[0], pods[1:3]) is None
        assert all(gb.fits(x, shape) for x in pods)


FORGERIES = [
    ("spec.queueName", "other-team", "queue"),
    ("spec.priorityClassRef", {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                               "name": "ray-worker"}, "priority class"),
    ("metadata.ownerReferences.0.uid", "someone-else", "owner"),
    ("metadata.ownerReferences.0.controller", True, "owner"),
    ("spec.podSets.0.count", 2, "head podSet of one"),
    ("spec.podSets.1.minCount", 1, "partial admission"),
    ("spec.podSets.0.template.spec.containers.0.resources", {"requests": {"cpu": "1m"}},
     "head podSet does not request"),
]


@pytest.mark.parametrize(("path", "value", "why"), FORGERIES)
def test_a_forged_pending_base_is_reported_and_deleted(path: str, value: Any, why: str) -> None:
    pods = cluster(3)
    base = edit(base_for(pods, "pending"), path, value)
    for shape in (base, slim_workload(copy.deepcopy(base))):
        assert why in (gb.mismatch(shape, pods[0], []) or "")
    steps, _ = gd.decide_gang(pods, {}, base, CTX)
    assert kinds(steps) == [(pods[0]["metadata"]["name"], "ReportConflict"), (None, "DeleteWorkload")]
    conflict, delete = (x for _, x in steps)
    assert isinstance(conflict, a.ReportConflict) and conflict.kind == a.CONFLICT_FORGED_WORKLOAD
    assert conflict.workload == base["metadata"]["name"] and why in conflict.message
    assert isinstance(delete, a.DeleteWorkload) and delete.uid == base["metadata"]["uid"]


def test_an_admitted_base_edited_under_its_running_pods_takes_them_down() -> None:
    pods = cluster(3, gated=False, phase="Running", ready=True)
    base = base_for(pods, "admitted")
    edited = copy.deepcopy(base)
    container(edited["spec"]["podSets"][1])["resources"] = {"requests": {"cpu": "1m"}}
    assert "does not request what pod" in (gb.mismatch(edited, pods[0], pods[1:3]) or "")
    steps, _ = gd.decide_gang(pods[:3], {}, edited, CTX)
    # The removals are proposals: a forged base is no cause the handler accepts,
    # so it reports them; and the base keeps the quota while pods run under it.
    assert [t for _, t in kinds(steps)] == ["ReportConflict", "EvictPod", "EvictPod", "EvictPod",
                                           "Wait"]


def test_partial_admission_is_not_trusted() -> None:
    pods = cluster(2)
    base = base_for(pods, "admitted")
    base["status"]["admission"]["podSetAssignments"][1]["count"] = 1
    assert "admitted fewer" in (gb.mismatch(base, pods[0], []) or "")
    assert gb.admitted_counts(base) == {"head": 1, GROUP: 1}


def test_workers_that_do_not_fit_a_forged_worker_podset_are_extras_and_its_slots_go_back() -> None:
    """A worker podSet asking less than the workers is harmless once nothing is released
    under it: the head runs, the workers queue on their own, the slots are handed back."""
    pods = cluster(3)
    base = base_for(pods, "admitted")
    container(base["spec"]["podSets"][1])["resources"] = {"requests": {"cpu": "1m"}}
    assert gb.mismatch(base, pods[0], []) is None
    steps, _ = gd.decide_gang(pods, {}, base, CTX)
    names = [x["metadata"]["name"] for x in pods]
    assert kinds(steps) == [(names[0], "LiftGate")] + [(n, "CreateWorkload") for n in names[1:]] + [
        (None, "SetReclaimable")]
    (reclaim,) = [x for _, x in steps if isinstance(x, a.SetReclaimable)]
    assert reclaim.counts == {GROUP: 2}


def test_a_base_under_its_name_with_a_pods_owner_is_no_base() -> None:
    """Read by name, a Workload owned by a pod is that pod's, not the gang's."""
    pods = cluster(2)
    base = base_for(pods, "pending")
    base["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "x",
                                            "uid": "y", "controller": False}]
    assert base["metadata"]["labels"][c.GANG_LABEL] and not gb.is_base(base)
    assert gb.mismatch(base, pods[0], []) is not None
