"""The exact pod writes: gate-lifting JSON patch, eviction condition, delete."""

from __future__ import annotations

import jsonpatch
import pytest

from raykueue.controller import patches
from raykueue.core import contract as c
from testkit import controller_objects as o


def test_lift_guards_uid_and_gate_position_then_removes_the_gate():
    pod = o.pod()
    pod["spec"]["schedulingGates"].insert(0, {"name": "example.com/first"})
    ops = patches.lift_gate_ops(pod, {}, [])
    assert ops == [
        {"op": "test", "path": "/metadata/uid", "value": pod["metadata"]["uid"]},
        {"op": "test", "path": "/spec/schedulingGates/1", "value": {"name": c.GATE}},
        {"op": "remove", "path": "/spec/schedulingGates/1"},
    ]
    assert jsonpatch.apply_patch(pod, ops)["spec"]["schedulingGates"] == [
        {"name": "example.com/first"}]


def test_lift_adds_selector_keys_escaped_and_appends_tolerations():
    pod = o.pod(node_selector={"team": "a"})
    tol = {"key": "pool", "operator": "Equal", "value": "a100", "effect": "NoSchedule"}
    ops = patches.lift_gate_ops(pod, {"cloud.google.com/gke-accelerator": "a100"}, [tol])
    assert {"op": "add", "path": "/spec/nodeSelector/cloud.google.com~1gke-accelerator",
            "value": "a100"} in ops
    assert {"op": "add", "path": "/spec/tolerations/-", "value": tol} in ops
    after = jsonpatch.apply_patch(pod, ops)
    assert after["spec"]["nodeSelector"] == {"team": "a",
                                             "cloud.google.com/gke-accelerator": "a100"}
    assert after["spec"]["tolerations"][-1] == tol


def test_lift_creates_selector_and_tolerations_when_the_pod_has_none():
    pod = o.pod()
    pod["spec"].pop("nodeSelector", None)
    pod["spec"].pop("tolerations")
    ops = patches.lift_gate_ops(pod, {"pool": "a100"}, [{"key": "k", "operator": "Exists"}])
    after = jsonpatch.apply_patch(pod, ops)
    assert after["spec"]["nodeSelector"] == {"pool": "a100"}
    assert after["spec"]["tolerations"] == [{"key": "k", "operator": "Exists"}]


def test_evicted_condition_is_an_apply_of_one_condition():
    pod = o.pod(gated=False, phase="Running")
    body = patches.evicted_condition_body(pod, "Preempted", "to make room", o.T2)
    assert body == {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod["metadata"]["name"], "namespace": "team-a",
                     "uid": pod["metadata"]["uid"]},
        "status": {"conditions": [{"type": c.EVICTED_CONDITION, "status": "True",
                                   "reason": "Preempted", "message": "to make room",
                                   "lastTransitionTime": o.T2}]},
    }


@pytest.mark.parametrize(("given", "used"), [("Preempted", "Preempted"),
                                             ("PodsReadyTimeout", "PodsReadyTimeout"),
                                             ("bad reason!", "badreason"),
                                             ("", "Evicted"), ("9lives", "Evicted")])
def test_condition_reason_is_always_valid(given, used):
    body = patches.evicted_condition_body(o.pod(), given, "m", o.T2)
    assert body["status"]["conditions"][0]["reason"] == used


def test_delete_is_conditional_on_the_uid():
    pod = o.pod()
    assert patches.delete_options(pod)["preconditions"] == {"uid": pod["metadata"]["uid"]}
