"""A RayCluster/RayJob/RayService passing raykueue's webhooks around Kueue's.

`kueue_defaults` plays what Kueue v0.19.2's Ray webhooks do on CREATE
(pkg/controller/jobs/ray*/..._webhook.go `Default`, pkg/controller/jobframework/
defaults.go): give an unlabelled object the namespace's `default` LocalQueue,
suspend it when it has a queue, and set `spec.managedBy` to MultiKueue's when
that queue's ClusterQueue has a MultiKueue admission check.
"""

from __future__ import annotations

import copy
import itertools
import json
from typing import Any

import pytest

from raykueue.core import contract as c
from raykueue.core.priority import PriorityPolicy
from raykueue.webhooks.autoscaler_env import ALLOCATE_TIMEOUT_ENV
from raykueue.webhooks.rayobjects import RayObjectPolicy, Stage
from raykueue.webhooks.rayrules import NamespaceFacts
from testkit.unit.webhooks_rayobjects import (
    DEFAULT_QUEUE,
    OPTED_IN,
    _suspend_node,
    cluster_spec,
    create,
    kueue_defaults,
    outcome,
    ray_object,
    refusal,
    stamps,
    templates,
    through,
)

KINDS = ("RayCluster", "RayJob", "RayService")


# --- hidden from Kueue ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("default_queue_exists", [False, True])
@pytest.mark.parametrize("queue_on_object", [False, True])
@pytest.mark.parametrize("kueue_reinvoked", [False, True])
def test_an_opted_in_object_is_never_suspended_and_keeps_its_queue_from_kueue(
        kind: str, default_queue_exists: bool, queue_on_object: bool, kueue_reinvoked: bool) -> None:
    obj = ray_object(kind, annotations=OPTED_IN,
                     labels={c.QUEUE_LABEL: "team-a"} if queue_on_object else None)
    stored = create(obj, default_queue_exists, kueue_reinvoked=kueue_reinvoked)
    assert _suspend_node(stored).get("suspend") in (None, False)
    assert c.QUEUE_LABEL not in stored["metadata"].get("labels", {})
    assert c.SUSPEND_REQUESTED_ANNOTATION not in stored["metadata"]["annotations"]
    if queue_on_object:
        assert stored["metadata"]["annotations"][c.QUEUE_ANNOTATION] == "team-a"


def test_a_rayclusters_template_queue_labels_move_to_the_annotation() -> None:
    obj = ray_object("RayCluster", annotations=OPTED_IN, template_labels={c.QUEUE_LABEL: "team-b"})
    stored = create(obj, default_queue_exists=True)
    head, small, gpu = templates(stored)
    for template in (head, gpu):
        assert c.QUEUE_LABEL not in template["metadata"]["labels"]
        assert template["metadata"]["annotations"][c.QUEUE_ANNOTATION] == "team-b"
    assert c.QUEUE_ANNOTATION not in small["metadata"].get("annotations", {})


def test_every_pod_template_of_an_opted_in_raycluster_is_stamped() -> None:
    stored = create(ray_object("RayCluster", annotations=OPTED_IN), default_queue_exists=False)
    assert stamps(stored) == [c.OPTED_IN_VALUE] * 3


@pytest.mark.parametrize("kind", ["RayJob", "RayService"])
def test_a_rayjobs_or_rayservices_cluster_spec_is_left_as_written(kind: str) -> None:
    """KubeRay copies their annotations onto the RayCluster it makes, where the first
    stage stamps; so a RayService's cluster hash never changes because of raykueue."""
    obj = ray_object(kind, annotations=OPTED_IN, template_labels={c.QUEUE_LABEL: "team-b"},
                     autoscaling=True)
    assert cluster_spec(create(obj, default_queue_exists=False)) == cluster_spec(obj)
    # Where Kueue's defaulting suspended it, `suspend: false` is what is left of that.
    stored = cluster_spec(create(obj, default_queue_exists=True))
    assert stored.pop("suspend", False) is False and stored == cluster_spec(obj)


@pytest.mark.parametrize("kind", KINDS)
def test_a_suspend_the_user_asked_for_survives_even_a_reinvoked_kueue(kind: str) -> None:
    obj = ray_object(kind, annotations=OPTED_IN, labels={c.QUEUE_LABEL: "team-a"}, suspend=True)
    stored = create(obj, default_queue_exists=True, kueue_reinvoked=True)
    assert _suspend_node(stored)["suspend"] is True
    # Kept: a reinvoked last stage must still tell the user's suspend from Kueue's.
    assert stored["metadata"]["annotations"][c.SUSPEND_REQUESTED_ANNOTATION] == "true"


def test_a_suspend_note_copied_from_a_rayjob_says_nothing_about_its_raycluster() -> None:
    obj = ray_object("RayCluster", annotations={**OPTED_IN, c.SUSPEND_REQUESTED_ANNOTATION: "true"})
    stored = create(obj, default_queue_exists=True)
    assert stored["spec"]["suspend"] is False
    assert c.SUSPEND_REQUESTED_ANNOTATION not in stored["metadata"]["annotations"]


@pytest.mark.parametrize("annotations", [None, {c.STANDALONE_ANNOTATION: "false"}])
def test_objects_not_opted_in_are_left_to_kueue(annotations: dict[str, str] | None) -> None:
    obj = ray_object("RayCluster", annotations=annotations, labels={c.QUEUE_LABEL: "team-a"})
    for stage in Stage:
        answer = outcome(obj, stage)
        assert answer.decision == "skipped" and answer.verdict.patch is None
    stored = create(obj, default_queue_exists=True)
    assert stored["spec"]["suspend"] is True and stored["metadata"]["labels"][c.QUEUE_LABEL] == "team-a"
    assert stamps(stored) == [None] * 3


def test_a_raycluster_is_decided_by_its_own_annotation_which_kuberay_copies_from_its_owner() -> None:
    # No owner clause: KubeRay copies a RayJob's/RayService's annotations onto the
    # RayCluster it makes (constructRayClusterForRayJob / ...ForRayService), so the
    # RayCluster itself says whether it opted in.
    obj = ray_object("RayCluster", labels={c.QUEUE_LABEL: "team-a"})
    obj["metadata"]["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "job",
                                           "uid": "u", "controller": True}]
    assert outcome(obj, Stage.FIRST).decision == "skipped"


def test_an_invalid_opt_in_is_denied_before_kueue_and_says_what_to_set() -> None:
    obj = ray_object("RayCluster", annotations={c.STANDALONE_ANNOTATION: "yes"})
    message = refusal(obj)
    assert '"true"' in message and '"false"' in message
    assert outcome(obj, Stage.LAST).verdict.allowed


@pytest.mark.parametrize("kind", KINDS)
def test_both_stages_are_idempotent(kind: str) -> None:
    obj = ray_object(kind, annotations=OPTED_IN, labels={c.QUEUE_LABEL: "team-a"},
                     template_labels={c.QUEUE_LABEL: "team-b"}, autoscaling=True)
    stored = create(obj, default_queue_exists=True)
    for stage, operation in itertools.product(Stage, ("CREATE", "UPDATE")):
        old = stored if operation == "UPDATE" else None
        assert outcome(stored, stage, operation, old).verdict.patch is None, (stage, operation)


def test_a_queue_label_added_by_an_update_is_moved_too() -> None:
    # Kueue's Ray webhooks only default on CREATE, but its reconciler acts on a
    # label whenever it appears (kubectl apply of a manifest that has one).
    stored = create(ray_object("RayCluster", annotations=OPTED_IN), default_queue_exists=False)
    updated_in = copy.deepcopy(stored)
    updated_in["metadata"].setdefault("labels", {})[c.QUEUE_LABEL] = "team-c"
    updated = through(updated_in, Stage.FIRST, "UPDATE", old=stored)
    assert c.QUEUE_LABEL not in updated["metadata"]["labels"]
    assert updated["metadata"]["annotations"][c.QUEUE_ANNOTATION] == "team-c"
    assert outcome(updated, Stage.LAST, "UPDATE", old=stored).verdict.patch is None


def test_other_kinds_and_operations_pass_untouched() -> None:
    pod = {"kind": "Pod", "metadata": {"annotations": OPTED_IN}}
    assert outcome(pod, Stage.FIRST).decision == "skipped"
    obj = ray_object("RayCluster", annotations=OPTED_IN, labels={c.QUEUE_LABEL: "team-a"})
    assert outcome(obj, Stage.FIRST, "DELETE").verdict.patch is None


# --- the allocate timeout -----------------------------------------------------------------


def test_the_first_stage_raises_a_rayclusters_allocate_timeout_unless_the_user_set_it() -> None:
    obj = ray_object("RayCluster", annotations=OPTED_IN, autoscaling=True)
    stored = through(obj, Stage.FIRST)
    assert stored["spec"]["autoscalerOptions"]["env"] == [{"name": ALLOCATE_TIMEOUT_ENV, "value": "86400"}]
    assert outcome(stored, Stage.FIRST).verdict.patch is None
    obj["spec"]["autoscalerOptions"] = {"env": [{"name": ALLOCATE_TIMEOUT_ENV, "value": "60"}]}
    assert through(obj, Stage.FIRST)["spec"]["autoscalerOptions"]["env"][0]["value"] == "60"


def test_a_reapply_that_drops_the_allocate_timeout_and_the_stamps_gets_both_back() -> None:
    """`kubectl apply` replaces workerGroupSpecs and autoscalerOptions.env whole (JSON
    merge patch on a custom resource): the first stage puts back what it keeps there."""
    manifest = ray_object("RayCluster", annotations=OPTED_IN, autoscaling=True)
    manifest["spec"]["autoscalerOptions"] = {"env": [{"name": "OTHER", "value": "1"}]}
    stored = create(manifest, default_queue_exists=True)
    reapplied = copy.deepcopy(stored)
    reapplied["spec"]["workerGroupSpecs"] = copy.deepcopy(manifest["spec"]["workerGroupSpecs"])
    reapplied["spec"]["autoscalerOptions"] = copy.deepcopy(manifest["spec"]["autoscalerOptions"])
    assert through(reapplied, Stage.FIRST, "UPDATE", old=stored) == stored


# --- one opt-in rule --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("was", "now"),
                         [(None, "true"), ("true", None), ("true", "false"), ("false", "true")])
def test_the_opt_in_of_a_live_cluster_cannot_change(kind: str, was: str | None, now: str | None) -> None:
    old = create(ray_object(kind, annotations={c.STANDALONE_ANNOTATION: was} if was else None),
                 default_queue_exists=False)
    new = copy.deepcopy(old)
    new["metadata"].setdefault("annotations", {}).pop(c.STANDALONE_ANNOTATION, None)
    if now:
        new["metadata"]["annotations"][c.STANDALONE_ANNOTATION] = now
    message = refusal(new, "UPDATE", old)
    assert c.STANDALONE_ANNOTATION in message
    assert ("Create a new RayService" if kind == "RayService" else "spec.suspend: true") in message


@pytest.mark.parametrize("kind", ["RayCluster", "RayJob"])
def test_a_suspended_cluster_may_change_its_opt_in_and_loses_its_stamps_with_it(kind: str) -> None:
    old = create(ray_object(kind, annotations=OPTED_IN, suspend=True), default_queue_exists=False)
    new = copy.deepcopy(old)
    del new["metadata"]["annotations"][c.STANDALONE_ANNOTATION]
    new["metadata"].setdefault("labels", {})[c.QUEUE_LABEL] = "team-a"  # handed back to Kueue
    handed_back = through(new, Stage.FIRST, "UPDATE", old)
    assert handed_back["metadata"]["labels"][c.QUEUE_LABEL] == "team-a"
    if kind == "RayCluster":
        assert stamps(old) == [c.OPTED_IN_VALUE] * 3 and stamps(handed_back) == [None] * 3
    # ... and back again, while still suspended.
    again = copy.deepcopy(handed_back)
    again["metadata"]["annotations"][c.STANDALONE_ANNOTATION] = "true"
    opted = through(again, Stage.FIRST, "UPDATE", handed_back)
    assert c.QUEUE_LABEL not in opted["metadata"]["labels"]
    if kind == "RayCluster":
        assert stamps(opted) == [c.OPTED_IN_VALUE] * 3


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("value", ["true", "false"])
@pytest.mark.parametrize("object_opts_in", [False, True])
def test_an_opt_in_on_a_pod_template_is_refused_saying_where_it_belongs(
        kind: str, value: str, object_opts_in: bool) -> None:
    obj = ray_object(kind, annotations=OPTED_IN if object_opts_in else None)
    worker = cluster_spec(obj)["workerGroupSpecs"][1]["template"]
    worker.setdefault("metadata", {})["annotations"] = {c.STANDALONE_ANNOTATION: value}
    message = refusal(obj)
    assert "workerGroupSpecs[1].template" in message and f"{kind}'s own metadata.annotations" in message


def test_an_opt_in_on_a_rayjobs_submitter_template_is_refused() -> None:
    obj = ray_object("RayJob", annotations=OPTED_IN)
    obj["spec"]["submitterPodTemplate"] = {"metadata": {"annotations": {c.STANDALONE_ANNOTATION: "true"}},
                                           "spec": {"containers": []}}
    assert "spec.submitterPodTemplate" in refusal(obj)


def test_a_template_opt_in_an_update_did_not_bring_is_left_alone() -> None:
    """Clusters that opted in on a template before this rule keep updating (the
    autoscaler's patches among them); their pods are decided by the stamp."""
    old = ray_object("RayCluster")
    old["spec"]["workerGroupSpecs"][0]["template"]["metadata"] = {
        "annotations": {c.STANDALONE_ANNOTATION: "true"}}
    new = copy.deepcopy(old)
    new["spec"]["workerGroupSpecs"][0]["replicas"] = 3
    assert outcome(new, Stage.FIRST, "UPDATE", old).verdict.allowed
    new["spec"]["workerGroupSpecs"][1]["template"]["metadata"] = {
        "annotations": {c.STANDALONE_ANNOTATION: "true"}}
    assert "workerGroupSpecs[1].template" in refusal(new, "UPDATE", old)


@pytest.mark.parametrize("mode", [None, "K8sJobMode"])
def test_a_rayjob_whose_submitter_runs_in_a_pod_of_its_own_is_accounted(mode: str | None) -> None:
    """K8sJobMode (KubeRay's default) is accepted; the submitter's sizing rides on the RayJob."""
    obj = ray_object("RayJob", annotations=OPTED_IN)
    if mode is None:
        del obj["spec"]["submissionMode"]  # KubeRay's CRD default: K8sJobMode
    else:
        obj["spec"]["submissionMode"] = mode
    out = through(obj, Stage.FIRST)
    assert json.loads(out["metadata"]["annotations"][c.SUBMITTER_ANNOTATION]) == {"containers": [{
        "name": "ray-job-submitter",
        "resources": {"requests": {"cpu": "500m", "memory": "200Mi"},
                      "limits": {"cpu": "1", "memory": "1Gi"}}}]}
    # Idempotent: a second pass (a re-apply, a reinvocation) changes nothing.
    assert not outcome(out, Stage.FIRST, "UPDATE", out).verdict.patch


@pytest.mark.parametrize("mode", ["SidecarMode", "HTTPMode", "InteractiveMode"])
def test_a_rayjob_without_a_submitter_pod_of_its_own_is_accepted(mode: str) -> None:
    obj = ray_object("RayJob", annotations=OPTED_IN)
    obj["spec"]["submissionMode"] = mode
    assert outcome(obj, Stage.FIRST).verdict.allowed


@pytest.mark.parametrize("kind", KINDS)
def test_a_worker_template_may_not_name_the_heads_priority_class(kind: str) -> None:
    obj = ray_object(kind, annotations=OPTED_IN)
    cluster_spec(obj)["workerGroupSpecs"][1]["template"]["metadata"]["labels"] = {
        c.PRIORITY_CLASS_LABEL: c.DEFAULT_HEAD_PRIORITY_CLASS}
    message = refusal(obj)
    assert "worker group gpu" in message and c.DEFAULT_HEAD_PRIORITY_CLASS in message
    # The head may, and so may a worker with a class that is not head-only.
    head = ray_object(kind, annotations=OPTED_IN, template_labels={})
    cluster_spec(head)["headGroupSpec"]["template"]["metadata"]["labels"] = {
        c.PRIORITY_CLASS_LABEL: c.DEFAULT_HEAD_PRIORITY_CLASS}
    assert outcome(head, Stage.FIRST).verdict.allowed
    strict = RayObjectPolicy(priority=PriorityPolicy(
        head_only_priority_classes=frozenset({"gold", c.DEFAULT_HEAD_PRIORITY_CLASS})))
    worker_labels = cluster_spec(obj)["workerGroupSpecs"][1]["template"]["metadata"]["labels"]
    worker_labels[c.PRIORITY_CLASS_LABEL] = "gold"
    assert "gold" in refusal(obj, policy=strict)
    assert outcome(obj, Stage.FIRST).verdict.allowed


def test_a_worker_priority_an_update_did_not_bring_is_left_alone() -> None:
    old = create(ray_object("RayCluster", annotations=OPTED_IN), default_queue_exists=False)
    old["spec"]["workerGroupSpecs"][0]["template"].setdefault("metadata", {}).setdefault("labels", {})[
        c.PRIORITY_CLASS_LABEL] = c.DEFAULT_HEAD_PRIORITY_CLASS
    new = copy.deepcopy(old)
    new["spec"]["workerGroupSpecs"][0]["replicas"] = 5
    assert outcome(new, Stage.FIRST, "UPDATE", old).verdict.allowed


@pytest.mark.parametrize("kind", KINDS)
def test_opting_in_where_kueue_manages_unqueued_ray_jobs_is_refused(kind: str) -> None:
    obj = ray_object(kind, annotations=OPTED_IN)
    message = refusal(obj, facts=NamespaceFacts(kueue_manages_unqueued=True, namespace="team-a"))
    assert "manageJobsWithoutQueueName" in message and "team-a" in message
    assert "labels of namespace team-a" in refusal(obj, facts=NamespaceFacts(kueue_manages_unqueued=None,
                                                                     namespace="team-a"))
    # A cluster opted in before Kueue's setup changed keeps updating.
    stored = create(obj, default_queue_exists=False)
    update = copy.deepcopy(stored)
    update["metadata"].setdefault("labels", {})[c.QUEUE_LABEL] = "team-c"
    assert outcome(update, Stage.FIRST, "UPDATE", stored,
                   facts=NamespaceFacts(kueue_manages_unqueued=True, namespace="team-a")).verdict.allowed


@pytest.mark.parametrize("kind", KINDS)
def test_multikueue_managed_by_is_refused_from_the_user_and_undone_from_kueue(kind: str) -> None:
    obj = ray_object(kind, annotations=OPTED_IN)
    obj["spec"]["managedBy"] = c.MULTIKUEUE_MANAGED_BY
    assert "spec.managedBy" in refusal(obj)
    # Kueue's defaulting (a default queue backed by MultiKueue) is taken back.
    del obj["spec"]["managedBy"]
    stored = create(obj, default_queue_exists=True, multikueue=True)
    assert "managedBy" not in stored["spec"]
    assert _suspend_node(stored).get("suspend") is False
    # KubeRay's own value is the user's to set.
    obj["spec"]["managedBy"] = c.KUBERAY_MANAGED_BY
    assert create(obj, default_queue_exists=False)["spec"]["managedBy"] == c.KUBERAY_MANAGED_BY


# --- what is not Kueue's defaulting stays ------------------------------------------------------


def policy_engine(obj: dict[str, Any], queue: str | None = None, suspend: bool = False) -> dict[str, Any]:
    """What a mutating policy (Kyverno, Gatekeeper) between our two stages may add."""
    obj = copy.deepcopy(obj)
    if queue:
        obj["metadata"].setdefault("labels", {})[c.QUEUE_LABEL] = queue
    if suspend:
        _suspend_node(obj)["suspend"] = True
    return obj


@pytest.mark.parametrize("kind", KINDS)
def test_a_queue_label_another_webhook_added_is_kept_as_our_annotation(kind: str) -> None:
    first = through(ray_object(kind, annotations=OPTED_IN), Stage.FIRST, facts=DEFAULT_QUEUE)
    stored = through(kueue_defaults(policy_engine(first, queue="mandated"), True), Stage.LAST,
                     facts=DEFAULT_QUEUE)
    assert stored["metadata"]["annotations"][c.QUEUE_ANNOTATION] == "mandated"
    assert c.QUEUE_LABEL not in stored["metadata"]["labels"]
    assert _suspend_node(stored)["suspend"] is False  # Kueue's, because of that label


def test_a_queue_label_another_webhook_added_that_conflicts_with_ours_is_refused() -> None:
    obj = ray_object("RayCluster", annotations={**OPTED_IN, c.QUEUE_ANNOTATION: "team-a"})
    first = through(obj, Stage.FIRST)
    answer = outcome(kueue_defaults(policy_engine(first, queue="mandated"), False), Stage.LAST)
    assert not answer.verdict.allowed
    assert "mandated" in answer.verdict.message and "team-a" in answer.verdict.message


def test_kueues_default_queue_goes_even_beside_ours() -> None:
    obj = ray_object("RayCluster", annotations={**OPTED_IN, c.QUEUE_ANNOTATION: "team-a"})
    stored = create(obj, default_queue_exists=True)
    assert stored["metadata"]["annotations"][c.QUEUE_ANNOTATION] == "team-a"
    assert c.QUEUE_LABEL not in stored["metadata"]["labels"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_suspend_set_without_a_queue_label_is_nobodys_defaulting_and_stays(kind: str) -> None:
    """An approval workflow's suspend: Kueue suspends only an object with a queue label."""
    first = through(ray_object(kind, annotations=OPTED_IN), Stage.FIRST)
    stored = through(kueue_defaults(policy_engine(first, suspend=True), False), Stage.LAST)
    assert _suspend_node(stored)["suspend"] is True


def test_on_update_a_queue_label_another_webhook_added_is_moved() -> None:
    stored = create(ray_object("RayCluster", annotations=OPTED_IN), default_queue_exists=False)
    update = policy_engine(stored, queue="mandated")
    after = through(update, Stage.LAST, "UPDATE", stored)
    assert after["metadata"]["annotations"][c.QUEUE_ANNOTATION] == "mandated"
    assert c.QUEUE_LABEL not in after["metadata"]["labels"]


def test_a_cluster_kueue_admitted_whole_before_raykueue_was_installed_is_left_to_kueue() -> None:
    """Opted in and queue-labelled before raykueue existed: Kueue admits it as one
    Workload, and its validating webhook refuses a queue label's removal while it runs."""
    old = ray_object("RayCluster", annotations=OPTED_IN, labels={c.QUEUE_LABEL: "team-a"})
    new = copy.deepcopy(old)
    new["spec"]["workerGroupSpecs"][0]["replicas"] = 4
    answer = outcome(new, Stage.FIRST, "UPDATE", old)
    assert answer.verdict.allowed and answer.verdict.patch is None
    assert "Kueue admits it whole" in answer.reason
