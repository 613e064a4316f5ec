"""Only the Workload raykueue would make for a pod may open its gate.

Anyone allowed to create Workloads can make one that carries our managed-by
label and an owner reference to a gated pod, and Kueue admits it. These are
the forgeries that must not lift the gate, and the honest shapes that must.
"""

from __future__ import annotations

import copy

import pytest

from raykueue.controller import actions as a
from raykueue.controller import decide as d
from raykueue.controller import pods as p
from raykueue.controller import workload as w
from raykueue.controller import workload_match as wm
from raykueue.controller.caches import slim_workload
from testkit import controller_objects as o
from testkit.unit.controller_decide import ctx


def forged(pod, **changes) -> dict:
    """Our admitted Workload for `pod`, then edited the way a forger would."""
    wl = o.workload(pod, "admitted")
    for path, value in changes.items():
        target = wl
        *parents, leaf = path.split(".")
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        target[leaf] = value
    return wl


def lifts(actions) -> bool:
    return any(isinstance(x, a.LiftGate) for x in actions)


def test_our_own_workload_matches_its_pod_and_lifts():
    pod = o.pod()
    wl = o.workload(pod, "admitted")
    assert wm.mismatch(wl, pod) is None
    assert lifts(d.decide(pod, [wl], ctx()))


def test_a_slimmed_cached_workload_still_matches():
    pod = o.pod()
    wl = slim_workload(o.workload(pod, "admitted"))
    assert "template" not in wl["spec"]["podSets"][0]
    assert wm.mismatch(wl, pod) is None
    assert wm.mismatch(slim_workload(wl), pod) is None  # idempotent: applied twice on our writes


def test_smaller_requests_than_the_pod_keep_the_gate():
    pod = o.pod()
    wl = o.workload(pod, "admitted")
    container = wl["spec"]["podSets"][0]["template"]["spec"]["containers"][0]
    container["resources"] = {"requests": {"cpu": "1m"}}
    for shape in (wl, slim_workload(copy.deepcopy(wl))):
        assert "request" in (wm.mismatch(shape, pod) or "")
        actions = d.decide(pod, [shape], ctx())
        assert not lifts(actions)
        conflict = next(x for x in actions if isinstance(x, a.ReportConflict))
        assert conflict.kind == a.CONFLICT_FORGED_WORKLOAD
        assert conflict.workload == wl["metadata"]["name"]


@pytest.mark.parametrize(("path", "value", "why"), [
    ("spec.queueName", "other-team", "queue"),
    ("spec.priorityClassRef", {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                               "name": "ray-head"}, "priority class"),
    ("spec.podSets.0.count", 0, "podSets"),
    ("spec.podSets.0.name", "other", "podSets"),
])
def test_other_queue_priority_or_pod_set_shape_keep_the_gate(path, value, why):
    pod = o.pod()
    wl = forged(pod, **{path: value})
    assert why in (wm.mismatch(wl, pod) or "")
    assert not lifts(d.decide(pod, [wl], ctx()))


def test_a_second_pod_set_keeps_the_gate():
    pod = o.pod()
    wl = o.workload(pod, "admitted")
    wl["spec"]["podSets"].append(copy.deepcopy(wl["spec"]["podSets"][0]) | {"name": "extra"})
    assert not lifts(d.decide(pod, [wl], ctx()))


def test_owner_reference_by_label_only_is_not_enough():
    pod = o.pod()
    wl = o.workload(pod, "admitted")
    # No owner reference to the pod (raykueue's is a non-controller one since it
    # lives beside Kueue's pod reconciler); the uid label alone still names it.
    wl["metadata"]["ownerReferences"] = []
    assert w.pod_uid_of(wl) == pod["metadata"]["uid"]
    assert "owner" in (wm.mismatch(wl, pod) or "")
    assert not lifts(d.decide(pod, [wl], ctx()))


def test_another_name_is_never_the_pods_workload():
    pod = o.pod()
    wl = forged(pod, **{"metadata.name": "mine-honest"})
    actions = d.decide(pod, [wl], ctx())
    assert not lifts(actions)
    # It is finished as a stray, and the pod gets the Workload we would make.
    assert a.FinishWorkload("mine-honest", a.FINISHED_DUPLICATE, actions[0].message) == actions[0]
    create = next(x for x in actions if isinstance(x, a.CreateWorkload))
    assert create.body["metadata"]["name"] == w.workload_name(pod)


def test_a_forged_head_workload_does_not_count_as_an_admitted_head():
    head = o.pod("head")
    wl = o.workload(head, "admitted")
    wl["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"] = {}
    assert not d.head_admitted([(head, wl)])
    assert d.head_admitted([(head, o.workload(head, "admitted"))])


def test_a_running_pod_is_not_judged_again():
    # Past the gate a mismatch opens nothing; its Workload still gets PodsReady.
    pod = o.pod(gated=False, phase="Running", ready=True)
    wl = forged(pod, **{"spec.queueName": "elsewhere"})
    (action,) = d.decide(pod, [wl], ctx())
    assert isinstance(action, a.SetPodsReady)


def test_sizing_fingerprint_sees_init_containers_overhead_and_sidecars():
    base = o.pod()["spec"]
    seen = {p.sizing_fingerprint(base)}
    for edit in ("init", "overhead", "sidecar"):
        spec = copy.deepcopy(base)
        if edit == "init":
            spec.setdefault("initContainers", []).append(
                {"name": "i", "resources": {"requests": {"cpu": "64"}}})
        elif edit == "overhead":
            spec["overhead"] = {"cpu": "10"}
        else:
            spec.setdefault("initContainers", []).append(
                {"name": "s", "restartPolicy": "Always", "resources": {}})
        seen.add(p.sizing_fingerprint(spec))
    assert len(seen) == 4
    # Fields that do not size the pod do not matter (the image, our gate).
    spec = copy.deepcopy(base)
    spec["containers"][0]["image"] = "other:tag"
    assert p.sizing_fingerprint(spec) == p.sizing_fingerprint(base)
