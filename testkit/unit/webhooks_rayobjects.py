"""What tests/unit/webhooks/test_rayobjects.py shares with other tests (so that no test module imports
another). That module: A RayCluster/RayJob/RayService passing raykueue's webhooks around Kueue's.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from raykueue.core import contract as c
from raykueue.webhooks.admit import admit_ray_object
from raykueue.webhooks.rayobjects import RayObjectPolicy, Stage
from raykueue.webhooks.rayrules import NamespaceFacts
from raykueue.webhooks.review import Review

SUSPEND = {"RayCluster": ("spec",), "RayJob": ("spec",), "RayService": ("spec", "rayClusterConfig")}


CLUSTER_SPEC = {"RayCluster": ("spec",), "RayJob": ("spec", "rayClusterSpec"),
                "RayService": ("spec", "rayClusterConfig")}


OPTED_IN = {c.STANDALONE_ANNOTATION: "true"}


POLICY = RayObjectPolicy(allocate_timeout=86400)


NO_DEFAULT_QUEUE = NamespaceFacts(namespace="team-a")


DEFAULT_QUEUE = NamespaceFacts(default_queue_exists=True, namespace="team-a")


def ray_object(kind: str, *, annotations: dict[str, str] | None = None,
               labels: dict[str, str] | None = None, template_labels: dict[str, str] | None = None,
               suspend: bool | None = None, autoscaling: bool = False) -> dict[str, Any]:
    cluster: dict[str, Any] = {
        "headGroupSpec": {"template": {"metadata": {"labels": dict(template_labels or {})},
                                       "spec": {"containers": []}}},
        "workerGroupSpecs": [
            {"groupName": "small", "template": {"spec": {"containers": []}}},
            {"groupName": "gpu", "template": {"metadata": {"labels": dict(template_labels or {})},
                                              "spec": {"containers": []}}},
        ],
    }
    if autoscaling:
        cluster["enableInTreeAutoscaling"] = True
    obj: dict[str, Any] = {"apiVersion": "ray.io/v1", "kind": kind,
                           "metadata": {"name": "rc", "namespace": "team-a"}, "spec": {}}
    if kind == "RayJob":
        # SidecarMode: the submitter runs in the head pod (K8sJobMode: test_submitter.py).
        obj["spec"]["submissionMode"] = "SidecarMode"
    if annotations is not None:
        obj["metadata"]["annotations"] = dict(annotations)
    if labels is not None:
        obj["metadata"]["labels"] = dict(labels)
    node = obj
    for part in CLUSTER_SPEC[kind]:
        node = node.setdefault(part, {})
    node.update(cluster)
    if suspend is not None:
        _suspend_node(obj)["suspend"] = suspend
    return obj


def _suspend_node(obj: dict[str, Any]) -> dict[str, Any]:
    node = obj
    for part in SUSPEND[obj["kind"]]:
        node = node.setdefault(part, {})
    return node


def cluster_spec(obj: dict[str, Any]) -> dict[str, Any]:
    node = obj
    for part in CLUSTER_SPEC[obj["kind"]]:
        node = node[part]
    return node


def templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = cluster_spec(obj)
    return [spec["headGroupSpec"]["template"]] + [g["template"] for g in spec["workerGroupSpecs"]]


def review(obj: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None) -> Review:
    return Review(uid="u", operation=operation, namespace="team-a", username="alice", dry_run=False,
                  object=obj, old_object=old)


def outcome(obj: dict[str, Any], stage: Stage, operation: str = "CREATE", old: dict[str, Any] | None = None,
            facts: NamespaceFacts = NO_DEFAULT_QUEUE, policy: RayObjectPolicy = POLICY):
    return admit_ray_object(review(obj, operation, old), stage, facts, policy)


def through(obj: dict[str, Any], stage: Stage, operation: str = "CREATE", old: dict[str, Any] | None = None,
            facts: NamespaceFacts = NO_DEFAULT_QUEUE, policy: RayObjectPolicy = POLICY) -> dict[str, Any]:
    answer = outcome(obj, stage, operation, old, facts, policy)
    assert answer.verdict.allowed, answer.verdict.message
    return jsonpatch.apply_patch(obj, answer.verdict.patch or [])


def refusal(obj: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None,
            facts: NamespaceFacts = NO_DEFAULT_QUEUE, policy: RayObjectPolicy = POLICY) -> str:
    answer = outcome(obj, Stage.FIRST, operation, old, facts, policy)
    assert not answer.verdict.allowed, "expected a refusal"
    return answer.verdict.message


def kueue_defaults(obj: dict[str, Any], default_queue_exists: bool,
                   multikueue: bool = False) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    labels = obj["metadata"].setdefault("labels", {})
    if default_queue_exists and not labels.get(c.QUEUE_LABEL):
        labels[c.QUEUE_LABEL] = c.DEFAULT_LOCAL_QUEUE
    if labels.get(c.QUEUE_LABEL):
        _suspend_node(obj)["suspend"] = True
        if multikueue and obj["spec"].get("managedBy") in (None, c.KUBERAY_MANAGED_BY):
            obj["spec"]["managedBy"] = c.MULTIKUEUE_MANAGED_BY
    return obj


def create(obj: dict[str, Any], default_queue_exists: bool, multikueue: bool = False,
           kueue_reinvoked: bool = False) -> dict[str, Any]:
    """FIRST, Kueue's defaulting, LAST: the object as the API server stores it.

    With `kueue_reinvoked`, the API server's second round (Kueue's Ray webhooks
    IfNeeded): Kueue's webhook again, then LAST again (IfNeeded, and it changed
    the object in the first round).
    """
    facts = DEFAULT_QUEUE if default_queue_exists else NO_DEFAULT_QUEUE
    once = through(kueue_defaults(through(obj, Stage.FIRST, facts=facts), default_queue_exists, multikueue),
                   Stage.LAST, facts=facts)
    if not kueue_reinvoked:
        return once
    return through(kueue_defaults(once, default_queue_exists, multikueue), Stage.LAST, facts=facts)


def stamps(obj: dict[str, Any]) -> list[str | None]:
    return [(t.get("metadata") or {}).get("labels", {}).get(c.OPTED_IN_LABEL) for t in templates(obj)]
