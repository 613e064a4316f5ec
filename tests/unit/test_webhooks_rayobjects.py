"""An opted-in RayCluster/RayJob/RayService passing raykueue's webhooks around Kueue's.

`kueue_defaults` plays what Kueue v0.19.2's Ray webhooks do on CREATE
(pkg/controller/jobs/ray*/..._webhook.go `Default`): give an unlabelled object
the namespace's `default` LocalQueue, then suspend it when it has a queue.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

import jsonpatch
import pytest

from raykueue.core import contract as c
from raykueue.webhooks.admit import admit_ray_object
from raykueue.webhooks.rayobjects import Stage
from raykueue.webhooks.review import Review

SUSPEND = {"RayCluster": ("spec",), "RayJob": ("spec",), "RayService": ("spec", "rayClusterConfig")}
CLUSTER_SPEC = {"RayCluster": ("spec",), "RayJob": ("spec", "rayClusterSpec"),
                "RayService": ("spec", "rayClusterConfig")}


def ray_object(kind: str, *, annotations: dict[str, str] | None = None,
               labels: dict[str, str] | None = None, template_labels: dict[str, str] | None = None,
               suspend: bool | None = None) -> dict[str, Any]:
    cluster = {
        "headGroupSpec": {"template": {"metadata": {"labels": dict(template_labels or {})},
                                       "spec": {"containers": []}}},
        "workerGroupSpecs": [
            {"groupName": "small", "template": {"spec": {"containers": []}}},
            {"groupName": "gpu", "template": {"metadata": {"labels": dict(template_labels or {})},
                                              "spec": {"containers": []}}},
        ],
    }
    obj: dict[str, Any] = {"apiVersion": "ray.io/v1", "kind": kind,
                           "metadata": {"name": "rc", "namespace": "team-a"}, "spec": {}}
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


def review(obj: dict[str, Any], operation: str = "CREATE") -> Review:
    return Review(uid="u", operation=operation, namespace="team-a", username="alice", dry_run=False,
                  object=obj, old_object=None)


def through(obj: dict[str, Any], stage: Stage, operation: str = "CREATE",
            owners: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    outcome = admit_ray_object(review(obj, operation), owners, stage)
    assert outcome.verdict.allowed, outcome.verdict.message
    return jsonpatch.apply_patch(obj, outcome.verdict.patch or [])


def kueue_defaults(obj: dict[str, Any], default_queue_exists: bool) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    labels = obj["metadata"].setdefault("labels", {})
    if default_queue_exists and not labels.get(c.QUEUE_LABEL):
        labels[c.QUEUE_LABEL] = c.DEFAULT_LOCAL_QUEUE
    if labels.get(c.QUEUE_LABEL):
        _suspend_node(obj)["suspend"] = True
    return obj


def create(obj: dict[str, Any], default_queue_exists: bool) -> dict[str, Any]:
    """FIRST, Kueue's defaulting, LAST: the object as the API server stores it."""
    return through(kueue_defaults(through(obj, Stage.FIRST), default_queue_exists), Stage.LAST)


OPTED_IN = {c.STANDALONE_ANNOTATION: "true"}


@pytest.mark.parametrize("kind", ["RayCluster", "RayJob", "RayService"])
@pytest.mark.parametrize("default_queue_exists", [False, True])
@pytest.mark.parametrize("where", ["object", "templates", "nowhere"])
def test_an_opted_in_object_is_never_suspended_and_keeps_its_queue_from_kueue(
        kind: str, default_queue_exists: bool, where: str) -> None:
    queue = {c.QUEUE_LABEL: "team-a"}
    obj = ray_object(kind, annotations=OPTED_IN, labels=queue if where == "object" else None,
                     template_labels=queue if where == "templates" else None)
    stored = create(obj, default_queue_exists)
    assert _suspend_node(stored).get("suspend") in (None, False)
    assert c.QUEUE_LABEL not in stored["metadata"].get("labels", {})
    assert c.SUSPEND_REQUESTED_ANNOTATION not in stored["metadata"]["annotations"]
    spec = stored
    for part in CLUSTER_SPEC[kind]:
        spec = spec[part]
    templates = [spec["headGroupSpec"]["template"]] + [g["template"] for g in spec["workerGroupSpecs"]]
    for template in templates:
        assert c.QUEUE_LABEL not in template.get("metadata", {}).get("labels", {})
    if where == "object":
        assert stored["metadata"]["annotations"][c.QUEUE_ANNOTATION] == "team-a"
    if where == "templates":
        assert templates[0]["metadata"]["annotations"][c.QUEUE_ANNOTATION] == "team-a"
        assert c.QUEUE_ANNOTATION not in templates[1].get("metadata", {}).get("annotations", {})
        assert templates[2]["metadata"]["annotations"][c.QUEUE_ANNOTATION] == "team-a"


@pytest.mark.parametrize("kind", ["RayCluster", "RayJob", "RayService"])
def test_a_suspend_the_user_asked_for_survives(kind: str) -> None:
    obj = ray_object(kind, annotations=OPTED_IN, labels={c.QUEUE_LABEL: "team-a"}, suspend=True)
    stored = create(obj, default_queue_exists=True)
    assert _suspend_node(stored)["suspend"] is True
    assert c.SUSPEND_REQUESTED_ANNOTATION not in stored["metadata"]["annotations"]


@pytest.mark.parametrize("annotations", [None, {c.STANDALONE_ANNOTATION: "false"}])
def test_objects_not_opted_in_are_left_to_kueue(annotations: dict[str, str] | None) -> None:
    obj = ray_object("RayCluster", annotations=annotations, labels={c.QUEUE_LABEL: "team-a"})
    for stage in Stage:
        outcome = admit_ray_object(review(obj), (), stage)
        assert outcome.decision == "skipped" and outcome.verdict.patch is None
    stored = create(obj, default_queue_exists=True)
    assert stored["spec"]["suspend"] is True and stored["metadata"]["labels"][c.QUEUE_LABEL] == "team-a"


def test_a_ray_cluster_is_opted_in_through_its_owner() -> None:
    owner = ray_object("RayJob", annotations=OPTED_IN)
    obj = ray_object("RayCluster", labels={c.QUEUE_LABEL: "team-a"})
    first = through(obj, Stage.FIRST, owners=(owner,))
    assert first["metadata"]["annotations"][c.QUEUE_ANNOTATION] == "team-a"
    assert c.QUEUE_LABEL not in first["metadata"]["labels"]


def test_an_invalid_opt_in_is_denied_before_kueue_and_says_what_to_set() -> None:
    obj = ray_object("RayCluster", annotations={c.STANDALONE_ANNOTATION: "yes"})
    first = admit_ray_object(review(obj), (), Stage.FIRST)
    assert not first.verdict.allowed
    assert '"true"' in first.verdict.message and '"false"' in first.verdict.message
    assert admit_ray_object(review(obj), (), Stage.LAST).verdict.allowed


def test_both_stages_are_idempotent() -> None:
    obj = ray_object("RayCluster", annotations=OPTED_IN, labels={c.QUEUE_LABEL: "team-a"},
                     template_labels={c.QUEUE_LABEL: "team-b"})
    stored = create(obj, default_queue_exists=True)
    for stage, operation in itertools.product(Stage, ("CREATE", "UPDATE")):
        assert admit_ray_object(review(stored, operation), (), stage).verdict.patch is None


def test_a_queue_label_added_by_an_update_is_moved_too() -> None:
    # Kueue's Ray webhooks only default on CREATE, but its reconciler acts on a
    # label whenever it appears (kubectl apply of a manifest that has one).
    stored = create(ray_object("RayCluster", annotations=OPTED_IN), default_queue_exists=False)
    stored["metadata"].setdefault("labels", {})[c.QUEUE_LABEL] = "team-c"
    updated = through(stored, Stage.FIRST, operation="UPDATE")
    assert c.QUEUE_LABEL not in updated["metadata"]["labels"]
    assert updated["metadata"]["annotations"][c.QUEUE_ANNOTATION] == "team-c"
    assert admit_ray_object(review(updated, "UPDATE"), (), Stage.LAST).verdict.patch is None


def test_other_kinds_and_operations_pass_untouched() -> None:
    pod = {"kind": "Pod", "metadata": {"annotations": OPTED_IN}}
    assert admit_ray_object(review(pod), (), Stage.FIRST).decision == "skipped"
    obj = ray_object("RayCluster", annotations=OPTED_IN, labels={c.QUEUE_LABEL: "team-a"})
    assert admit_ray_object(review(obj, "DELETE"), (), Stage.FIRST).verdict.patch is None


@pytest.mark.parametrize("kind", ["RayCluster", "RayJob", "RayService"])
def test_the_first_stage_raises_the_autoscalers_allocate_timeout_unless_the_user_set_it(kind: str) -> None:
    from raykueue.webhooks.autoscaler_env import ALLOCATE_TIMEOUT_ENV

    obj = ray_object(kind, annotations=OPTED_IN)
    node = obj
    for part in CLUSTER_SPEC[kind]:
        node = node[part]
    node["enableInTreeAutoscaling"] = True
    outcome = admit_ray_object(review(obj), (), Stage.FIRST, allocate_timeout=86400)
    stored = jsonpatch.apply_patch(obj, outcome.verdict.patch or [])
    spec = stored
    for part in CLUSTER_SPEC[kind]:
        spec = spec[part]
    assert spec["autoscalerOptions"]["env"] == [{"name": ALLOCATE_TIMEOUT_ENV, "value": "86400"}]
    assert admit_ray_object(review(stored), (), Stage.FIRST, allocate_timeout=86400).verdict.patch is None
    node["autoscalerOptions"] = {"env": [{"name": ALLOCATE_TIMEOUT_ENV, "value": "60"}]}
    assert admit_ray_object(review(obj), (), Stage.FIRST, allocate_timeout=86400).verdict.patch is None
