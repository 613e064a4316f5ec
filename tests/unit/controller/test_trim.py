"""The controller's caches keep what its decisions read, and nothing else.

Each transform (`controller.caches.slim_pod`, `slim_workload`) keeps the
fields named beside it and drops the bulk (managedFields, container specs,
volumes, container statuses, Kueue's status noise). The decisions (`decide`,
`head_admitted`, the stuck-gates report, `explain`) must answer the same on
trimmed objects as on whole ones: a consumer that starts reading a dropped
field makes one of the scenarios below disagree.
"""

from __future__ import annotations

import copy
import itertools
import sys
from typing import Any

import orjson
import pytest

from raykueue.controller import decide as d
from raykueue.controller import explain as e
from raykueue.controller import pods as p
from raykueue.controller import stuck
from raykueue.controller import workload as w
from raykueue.controller import workload_match as wm
from raykueue.controller.caches import slim_pod, slim_workload
from raykueue.controller.facts import Facts
from raykueue.controller.gang import base as gb
from raykueue.core import contract as c
from testkit import controller_objects as o
from testkit.listsource import facts_of
from testkit.unit.controller_decide import PRIORITIES, ctx


def running_pod(role: str = c.ROLE_WORKER, **kw: Any) -> dict[str, Any]:
    """A pod past the gate with what the kubelet adds: container statuses."""
    pod = o.pod(role, gated=False, phase="Running", **kw)
    pod["metadata"]["managedFields"] = [{"manager": "kubelet", "operation": "Update",
                                         "fieldsV1": {"f:status": {"f:podIP": {}}}}]
    pod["status"].update(podIP="10.0.1.2", hostIP="10.0.0.1", startTime=o.T1, containerStatuses=[
        {"name": x["name"], "ready": True, "restartCount": 0, "image": x["image"],
         "state": {"running": {"startedAt": o.T1}}} for x in pod["spec"]["containers"]])
    return pod


def test_a_trimmed_running_pod_keeps_what_decisions_read_and_drops_the_rest():
    whole = running_pod(ready=True, node_selector={"pool": "a100"})
    slim = slim_pod(copy.deepcopy(whole))
    assert slim["metadata"]["labels"] == whole["metadata"]["labels"]
    assert slim["metadata"]["ownerReferences"] == whole["metadata"]["ownerReferences"]
    assert (p.uid(slim), p.key(slim), p.phase(slim)) == (p.uid(whole), p.key(whole), "Running")
    assert p.is_ready(slim) and not p.is_gated(slim)
    assert p.node_selector(slim) == {"pool": "a100"}
    assert p.tolerations(slim) == p.tolerations(whole)
    assert "managedFields" not in slim["metadata"]
    # nodeName and each container's state kind stay (issue 28: a pod being deleted
    # holds its quota until it has stopped, removal.has_stopped); the rest goes.
    assert set(slim["spec"]) <= {"schedulingGates", "nodeSelector", "tolerations", "nodeName"}
    assert slim["status"]["containerStatuses"] == [{"state": {"running": {}}}] * len(
        whole["spec"]["containers"])
    assert [x["type"] for x in slim["status"]["conditions"]] == ["Ready"]
    # Nothing builds a Workload for a pod past the gate: its spec is not kept.
    assert slim.spec_json is None
    with pytest.raises(ValueError, match="not kept"):
        p.full_spec(slim)


@pytest.mark.parametrize("role", [c.ROLE_HEAD, c.ROLE_WORKER])
def test_a_trimmed_gated_pod_still_builds_the_same_workload(role: str):
    whole = o.pod(role)
    whole["metadata"]["managedFields"] = [{"manager": "kuberay-operator", "fieldsV1": {}}]
    slim = slim_pod(copy.deepcopy(whole))
    assert p.is_gated(slim) and "containers" not in slim["spec"]
    assert w.build_workload(slim, w.Priority("x", 1)) == w.build_workload(whole, w.Priority("x", 1))
    assert wm.pod_sizing(slim) == wm.pod_sizing(whole)
    assert slim_pod(slim) is slim  # applied again to our writes' results


def test_a_trimmed_gang_pod_keeps_its_minimums_and_its_spec_past_the_gate():
    # A gang's base is built from its groups' oldest pods, gated or not.
    whole = running_pod()
    whole["metadata"]["labels"][c.GANG_LABEL] = "raycluster-gpu"
    whole["metadata"].setdefault("annotations", {})[c.GANG_MIN_ANNOTATION] = '{"headgroup": 1}'
    slim = slim_pod(copy.deepcopy(whole))
    assert gb.mins_of(slim) == gb.mins_of(whole)
    assert gb.mins_of(slim)["headgroup"] == 1
    assert w.pod_set_template(slim) == w.pod_set_template(whole)


def test_a_trimmed_workload_keeps_what_decisions_read_and_drops_the_rest():
    pod = o.pod()
    whole = o.workload(pod, "pending")
    slim = slim_workload(copy.deepcopy(whole))
    assert "managedFields" not in slim["metadata"]
    assert "template" not in slim["spec"]["podSets"][0]
    assert "resourceRequests" not in slim["status"]
    assert slim["status"]["conditions"] == whole["status"]["conditions"]
    assert (w.queue_name(slim), w.priority_class_name(slim), w.priority_value(slim)) == (
        w.queue_name(whole), w.priority_class_name(whole), w.priority_value(whole))
    assert w.owner_pod(slim) == w.owner_pod(whole) and w.is_ours(slim)
    assert wm.mismatch(slim, pod) is None
    admitted = o.workload(pod, "admitted")
    assert slim_workload(copy.deepcopy(admitted))["status"]["admission"] == (
        admitted["status"]["admission"])


def _pods() -> list[dict[str, Any]]:
    out = [o.pod(role, **kw) for role, kw in itertools.product(
        (c.ROLE_HEAD, c.ROLE_WORKER),
        ({}, {"deleting": True}, {"node_selector": {"pool": "h100"}}, {"queue": None},
         {"priority": "missing-class"}))]
    out += [running_pod(role, ready=ready) for role in (c.ROLE_HEAD, c.ROLE_WORKER)
            for ready in (True, False)]
    out += [o.pod(gated=False, phase=phase) for phase in ("Succeeded", "Failed")]
    out += [running_pod(deleting=True)]
    return out


def _workloads(pod: dict[str, Any]) -> list[list[dict[str, Any]]]:
    shapes: list[list[dict[str, Any]]] = [[]]
    for state in ("new", "pending", "reserved", "admitted", "evicted", "finished"):
        shapes.append([o.workload(pod, state)])
    for ready in ("True", "False"):
        shapes.append([o.workload(pod, "admitted", pods_ready=ready)])
    shapes.append([o.workload(pod, "admitted", ours=False)])
    smaller = o.workload(pod, "admitted")
    smaller["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"] = {}
    shapes.append([smaller])
    return shapes


def _scenarios():
    for pod in _pods():
        for wls in _workloads(pod):
            yield pod, wls


def _trimmed(pod: dict[str, Any], wls: list[dict[str, Any]]):
    slim, slim_wls = slim_pod(copy.deepcopy(pod)), [slim_workload(copy.deepcopy(x)) for x in wls]
    if d.needs_live_pod_spec(slim, slim_wls):
        # The Reader reads such a pod live (a running pod of ours with no Workload:
        # its Workload is built from its spec, which the cache drops).
        slim = copy.deepcopy(pod)
    return slim, slim_wls


def test_decide_answers_the_same_on_trimmed_objects():
    seen = set()
    for pod, wls in _scenarios():
        slim, slim_wls = _trimmed(pod, wls)
        for context in (ctx(), ctx(head_admitted=False), ctx(pods_ready=False)):
            expected = d.decide(pod, wls, context)
            assert d.decide(slim, slim_wls, context) == expected, (p.name(pod), wls)
            seen.update(type(x).__name__ for x in expected)
        # A pod that left the cache: its last state as the cache kept it.
        departed = d.Context(departed=slim)
        assert d.decide(None, slim_wls, departed) == d.decide(None, wls, d.Context(departed=pod))
    # The scenarios reach every kind of decision that reads a pod or a Workload.
    assert {"CreateWorkload", "LiftGate", "Wait", "Warn", "EvictPod", "FinishWorkload",
            "DeleteWorkload", "SetPodsReady", "ReportConflict"} <= seen


def test_head_first_and_the_stuck_report_answer_the_same_on_trimmed_objects():
    for pod, wls in _scenarios():
        slim, slim_wls = _trimmed(pod, wls)
        mine = next(iter(wls), None)
        slim_mine = next(iter(slim_wls), None)
        assert d.head_admitted([(slim, slim_mine)]) == d.head_admitted([(pod, mine)])
        worker = o.pod(cluster=p.cluster(pod) or "")
        whole, slim_pods = [pod, worker], [slim, slim_pod(copy.deepcopy(worker))]
        whole_report = stuck.gated(whole, facts_of(whole, wls, priority_values=PRIORITIES), 0.0)
        slim_report = stuck.gated(slim_pods, facts_of(slim_pods, slim_wls,
                                                      priority_values=PRIORITIES), 0.0)
        assert [(p.name(x.pod), x.queue, x.reason, x.why()) for x in slim_report] == [
            (p.name(x.pod), x.queue, x.reason, x.why()) for x in whole_report]


def test_explain_renders_the_same_from_trimmed_objects():
    for pod, wls in _scenarios():
        slim, slim_wls = _trimmed(pod, wls)
        assert e.explain(Facts(slim, slim_wls, ctx()), queue_peers=slim_wls) == (
            e.explain(Facts(pod, wls, ctx()), queue_peers=wls))


def test_a_clusters_pods_share_their_repeated_fields_in_the_cache():
    one, two = (slim_pod(running_pod(ready=True)) for _ in range(2))
    assert p.uid(one) != p.uid(two)
    for path in (("metadata", "labels"), ("metadata", "ownerReferences"), ("spec",)):
        a, b = one, two
        for key in path:
            a, b = a[key], b[key]
        assert a is b, path
    assert one["status"]["conditions"] is two["status"]["conditions"]


def test_repeated_strings_are_interned_and_a_resource_version_is_not():
    # As from the API: every string a fresh object, none interned.
    def parsed(obj: dict[str, Any]) -> dict[str, Any]:
        return orjson.loads(orjson.dumps(obj))

    pod = o.pod()
    one, two = (slim_pod(parsed(running_pod(ready=True))) for _ in range(2))
    wl_one, wl_two = (slim_workload(parsed(o.workload(pod, "admitted"))) for _ in range(2))
    assert one["status"]["phase"] is two["status"]["phase"]
    assert wl_one["status"]["conditions"][0]["reason"] is wl_two["status"]["conditions"][0]["reason"]
    # A resourceVersion repeats nowhere: interned, it would add an entry to the
    # interpreter's table and save no copy. sys.intern returns the cached string
    # only if that one was interned.
    for obj in (one, wl_one):
        value = obj["metadata"]["resourceVersion"]
        assert sys.intern("".join(value)) is not value
    assert sys.intern("".join(p.uid(one))) is p.uid(one)  # a uid does repeat: its Workload's owner
    # The fingerprints ride in slots: an instance __dict__ is a dict more per object.
    assert not hasattr(one, "__dict__") and not hasattr(wl_one, "__dict__")
