"""The validating webhook: who may lift the gate, and the queue label of a gated pod."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from raykueue.core import contract as c
from raykueue.webhooks.admit import admit_update
from raykueue.webhooks.review import parse
from testkit import reviews as rv

CONTROLLER = c.DEFAULT_CONTROLLER_IDENTITY
CONTROLLERS = frozenset({CONTROLLER})


def gated_pod() -> dict[str, Any]:
    pod = copy.deepcopy(rv.pod_of(rv.worker_review()))
    pod["metadata"]["name"] = "raycluster-gpu-gpu-group-worker-x7k2p"
    pod["metadata"]["uid"] = "1c1e8d8a-8e0e-4b7e-9a58-61f4d8c6a0a1"
    pod["metadata"]["labels"][c.QUEUE_LABEL] = "team-a"
    pod["spec"]["schedulingGates"] = [{"name": c.GATE}]
    return pod


def without_gate(pod: dict[str, Any]) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["spec"]["schedulingGates"] = [g for g in pod["spec"]["schedulingGates"] if g["name"] != c.GATE]
    return pod


def judge(old: dict[str, Any], new: dict[str, Any], user: str):
    return admit_update(parse(orjson.dumps(rv.update_review(old, new, user))), CONTROLLERS)


def test_controller_may_lift_the_gate() -> None:
    old = gated_pod()
    assert judge(old, without_gate(old), CONTROLLER).verdict.allowed


def test_anyone_else_lifting_the_gate_is_denied_with_an_explanation() -> None:
    old = gated_pod()
    outcome = judge(old, without_gate(old), "kubernetes-admin")
    assert not outcome.verdict.allowed
    message = outcome.verdict.message
    assert c.GATE in message and "Kueue admits" in message and "kubernetes-admin" in message


def test_the_gate_lift_denial_gives_an_explain_command_that_finds_the_pod() -> None:
    old = gated_pod()
    old["metadata"]["namespace"] = "team-a-ns"
    message = judge(old, without_gate(old), "kubernetes-admin").verdict.message
    # explain otherwise looks in the kubeconfig context's namespace, maybe not the pod's.
    assert "`raykueue explain -n team-a-ns raycluster-gpu-gpu-group-worker-x7k2p`" in message


def test_other_updates_of_a_gated_pod_are_allowed() -> None:
    old = gated_pod()
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["team"] = "ml"
    assert judge(old, new, "kubernetes-admin").verdict.allowed


def test_queue_label_of_a_gated_pod_may_not_change() -> None:
    old = gated_pod()
    for value in ("team-b", None):
        new = copy.deepcopy(old)
        if value is None:
            del new["metadata"]["labels"][c.QUEUE_LABEL]
        else:
            new["metadata"]["labels"][c.QUEUE_LABEL] = value
        for user in ("kubernetes-admin", CONTROLLER):
            outcome = judge(old, new, user)
            assert not outcome.verdict.allowed
            assert c.QUEUE_LABEL in outcome.verdict.message


def test_pods_not_gated_by_raykueue_are_not_judged() -> None:
    old = without_gate(gated_pod())
    new = copy.deepcopy(old)
    new["metadata"]["labels"][c.QUEUE_LABEL] = "team-b"
    assert judge(old, new, "kubernetes-admin").verdict.allowed


def test_other_gates_may_be_removed_by_anyone() -> None:
    old = gated_pod()
    old["spec"]["schedulingGates"].insert(0, {"name": "example.com/other"})
    new = copy.deepcopy(old)
    new["spec"]["schedulingGates"] = [{"name": c.GATE}]
    assert judge(old, new, "kubernetes-admin").verdict.allowed


def test_controller_identity_is_configurable() -> None:
    old = gated_pod()
    review = parse(orjson.dumps(rv.update_review(old, without_gate(old), "admin")))
    assert admit_update(review, frozenset({"admin"})).verdict.allowed
    assert not admit_update(review, CONTROLLERS).verdict.allowed


@pytest.mark.parametrize("key", [c.NODE_TYPE_LABEL, c.CLUSTER_LABEL, c.GROUP_LABEL,
                                 c.PRIORITY_CLASS_LABEL, c.MANAGED_BY_LABEL, c.OPTED_IN_LABEL])
@pytest.mark.parametrize("change", ["remove", "set"])
def test_labels_the_workload_was_built_from_are_frozen_while_gated(key, change) -> None:
    # Removing ray.io/node-type in one update would hide the next one (the
    # gate's removal) from this webhook: its objectSelector needs the label on
    # the old or the new pod. So it, and the rest, may not move at all.
    old = gated_pod()
    old["metadata"]["labels"].setdefault(c.GROUP_LABEL, "gpu-group")
    old["metadata"]["labels"].setdefault(c.PRIORITY_CLASS_LABEL, "ray-worker")
    old["metadata"]["labels"].setdefault(c.MANAGED_BY_LABEL, c.MANAGED_BY_VALUE)
    old["metadata"]["labels"].setdefault(c.OPTED_IN_LABEL, c.OPTED_IN_VALUE)
    new = copy.deepcopy(old)
    if change == "remove":
        new["metadata"]["labels"].pop(key, None)
    else:
        new["metadata"]["labels"][key] = "something-else"
    for user in ("kubernetes-admin", CONTROLLER):
        outcome = judge(old, new, user)
        assert not outcome.verdict.allowed
        assert key in outcome.verdict.message and "recreate" in outcome.verdict.message


def test_labels_may_move_once_the_gate_is_gone() -> None:
    old = without_gate(gated_pod())
    new = copy.deepcopy(old)
    del new["metadata"]["labels"][c.NODE_TYPE_LABEL]
    assert judge(old, new, "kubernetes-admin").verdict.allowed
