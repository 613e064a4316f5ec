"""The mutating webhook's rules, from a real-shaped AdmissionReview to the patched pod."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from raykueue.core import contract as c
from raykueue.core.objects import is_dns1123_subdomain
from raykueue.core.priority import PodPriority, PriorityPolicy
from raykueue.core.rayobjects import ray_owner
from raykueue.webhooks.classify import PodContext
from raykueue.webhooks.review import encode
from testkit import reviews as rv
from testkit.reviews import gates
from testkit.unit.webhooks_mutate import RAYCLUSTER, patched, run


def opted_in(review: dict[str, Any]) -> dict[str, Any]:
    """A KubeRay pod of an opted-in RayCluster: the first stage stamped its template."""
    return rv.set_label(review, c.OPTED_IN_LABEL, c.OPTED_IN_VALUE)


def bare(review: dict[str, Any]) -> dict[str, Any]:
    """The pod without its Ray owner: one a user creates on its own."""
    review = copy.deepcopy(review)
    rv.pod_of(review)["metadata"].pop("ownerReferences", None)
    return review


def with_queue(review: dict[str, Any], queue: str = "team-a") -> dict[str, Any]:
    return rv.set_label(review, c.QUEUE_LABEL, queue)


# --- not ours -----------------------------------------------------------------


def test_pod_without_opt_in_is_untouched() -> None:
    review = with_queue(rv.head_review())
    outcome = run(review)
    assert outcome.verdict.allowed and outcome.verdict.patch is None
    assert outcome.decision == "skipped" and outcome.reason == "not opted in"


@pytest.mark.parametrize("node_type", ["redis-cleanup", "submitter", None])
def test_non_head_worker_pods_are_not_managed(node_type: str | None) -> None:
    review = opted_in(with_queue(rv.set_label(rv.head_review(), c.NODE_TYPE_LABEL, node_type)))
    outcome = run(review)
    assert outcome.verdict.allowed and outcome.verdict.patch is None
    assert outcome.reason == "not a Ray head or worker"


def test_the_stamp_decides_a_kuberay_pod_whatever_its_own_annotation_says() -> None:
    """One cluster, one regime: "nearest wins" let a worker template opt out of an
    opted-in cluster (Kueue's pod integration then took those workers)."""
    stamped_out = rv.set_annotation(opted_in(rv.worker_review()), c.STANDALONE_ANNOTATION, "false")
    assert run(stamped_out, PodContext(owners=(RAYCLUSTER,))).decision == "gated"
    not_opted_in = {**RAYCLUSTER, "metadata": {**RAYCLUSTER["metadata"], "annotations": {}}}
    unstamped_in = rv.set_annotation(rv.worker_review(), c.STANDALONE_ANNOTATION, "true")
    outcome = run(unstamped_in, PodContext(owners=(not_opted_in,)))
    assert outcome.decision == "skipped" and outcome.verdict.patch is None


def test_a_bare_pod_decides_its_own_opt_in() -> None:
    review = bare(with_queue(rv.worker_review()))
    assert run(rv.set_annotation(review, c.STANDALONE_ANNOTATION, "true")).decision == "gated"
    outcome = run(rv.set_annotation(review, c.STANDALONE_ANNOTATION, "false"))
    assert outcome.decision == "skipped" and outcome.reason == "opted out on the pod"
    assert run(review).reason == "not opted in"


def _taken_by_kueue(review: dict[str, Any]) -> dict[str, Any]:
    """What Kueue's pod webhook (called before ours) does to a pod it takes, queue defaulted."""
    review = rv.set_label(review, c.KUEUE_MANAGED_LABEL, "true")
    review = rv.set_label(review, c.QUEUE_LABEL, c.DEFAULT_LOCAL_QUEUE)
    review = rv.set_label(review, c.PRIORITY_CLASS_LABEL, c.KUEUE_DEFAULT_PRIORITY_CLASS)
    review = rv.set_annotation(review, c.KUEUE_ROLE_HASH_ANNOTATION, "abc123")
    review = _with_gate(review, c.KUEUE_POD_GATE)
    review = _with_gate(review, c.KUEUE_TOPOLOGY_GATE)
    rv.pod_of(review)["metadata"]["finalizers"] = ["other/keep", c.KUEUE_POD_FINALIZER]
    return review


def test_an_opted_in_pod_kueue_took_in_the_same_request_is_taken_back() -> None:
    review = _taken_by_kueue(opted_in(rv.worker_review()))
    cluster = {**RAYCLUSTER, "metadata": {**RAYCLUSTER["metadata"], "labels": {},
                                          "annotations": {c.STANDALONE_ANNOTATION: "true",
                                                          c.QUEUE_ANNOTATION: "team-a"}}}
    outcome = run(review, PodContext(owners=(cluster,), default_queue_exists=True))
    assert outcome.decision == "gated"
    pod = patched(review, outcome)
    meta = pod["metadata"]
    assert c.KUEUE_MANAGED_LABEL not in meta["labels"]
    assert c.KUEUE_ROLE_HASH_ANNOTATION not in meta.get("annotations", {})
    assert meta["finalizers"] == ["other/keep"]
    assert gates(pod) == [c.GATE]
    # Kueue's defaulted "default" queue and priority give way to the cluster's queue
    # and the worker class.
    assert meta["labels"][c.QUEUE_LABEL] == "team-a"
    assert meta["labels"][c.PRIORITY_CLASS_LABEL] == c.DEFAULT_WORKER_PRIORITY_CLASS
    assert outcome.reason.startswith("queue from RayCluster raycluster-gpu annotation")


def test_pods_of_a_ray_owner_kueue_manages_whole_are_left_alone_with_a_warning() -> None:
    review = opted_in(rv.worker_review())
    ctx = PodContext(owners=(RAYCLUSTER,),
                  kueue_job_kinds=frozenset({"RayCluster"}))
    outcome = run(review, ctx)
    assert outcome.verdict.allowed and outcome.verdict.patch is None
    assert outcome.reason == "Kueue admits RayCluster raycluster-gpu as a whole"
    assert any(c.FIRST_MUTATING_WEBHOOK_CONFIG in w for w in outcome.verdict.warnings)


def test_a_stamped_pod_stays_raykueues_until_kueue_takes_its_cluster() -> None:
    """A namespace Kueue manages unqueued jobs in, labelled after the opt-in: Kueue leaves
    the running cluster alone until it suspends it (the hand-over unstamps it then), so
    until then its stamped pods are gated, never skipped into the policy's refusal."""
    cluster = {**RAYCLUSTER, "metadata": {**RAYCLUSTER["metadata"], "labels": {}}}
    ctx = PodContext(owners=(cluster,), default_queue_exists=True,
                  kueue_job_kinds=frozenset({"RayCluster"}), kueue_manages_unqueued=True)
    assert run(opted_in(rv.worker_review()), ctx).decision == "gated"
    # A pod KubeRay made from the template it read just before the hand-over: gated
    # (KubeRay deletes it on the suspend), not left to the policy to refuse.
    handed = {**RAYCLUSTER, "metadata": {**RAYCLUSTER["metadata"], "annotations": {
        **RAYCLUSTER["metadata"]["annotations"], c.HANDED_TO_KUEUE_ANNOTATION: "suspended"}}}
    ctx_handed = PodContext(owners=(handed,),
                         kueue_job_kinds=frozenset({"RayCluster"}), kueue_manages_unqueued=True)
    assert run(opted_in(rv.worker_review()), ctx_handed).decision == "gated"


def test_the_queue_annotation_raykueue_moved_from_the_template_names_the_queue() -> None:
    review = rv.set_annotation(opted_in(rv.head_review()), c.QUEUE_ANNOTATION, "team-b")
    outcome = run(review, PodContext(owners=(RAYCLUSTER,)))
    assert outcome.queue == "team-b" and outcome.reason.startswith("queue from pod annotation")


def test_non_create_operations_pass_through() -> None:
    review = opted_in(with_queue(rv.head_review()))
    review["request"]["operation"] = "UPDATE"
    outcome = run(review)
    assert outcome.verdict.allowed and outcome.verdict.patch is None


# --- opt-in values ----------------------------------------------------------


@pytest.mark.parametrize("value", ["True", "yes", "1", ""])
def test_invalid_opt_in_value_on_a_bare_pod_is_denied_with_the_valid_values(value: str) -> None:
    review = rv.set_annotation(bare(with_queue(rv.head_review())), c.STANDALONE_ANNOTATION, value)
    outcome = run(review)
    assert not outcome.verdict.allowed
    assert c.STANDALONE_ANNOTATION in outcome.verdict.message
    assert '"true"' in outcome.verdict.message and '"false"' in outcome.verdict.message


@pytest.mark.parametrize("value", ["True", "yes", "false"])
def test_a_ray_pod_that_is_not_opted_in_is_never_denied(value: str) -> None:
    """Whatever its own annotation or its RayCluster's (an invalid one is refused on
    the RayCluster itself, by the first stage)."""
    cluster = copy.deepcopy(RAYCLUSTER)
    cluster["metadata"]["annotations"][c.STANDALONE_ANNOTATION] = value
    review = rv.set_annotation(rv.worker_review(), c.STANDALONE_ANNOTATION, value)
    for ctx in (PodContext(owners=(cluster,)), PodContext()):
        outcome = run(review, ctx)
        assert outcome.verdict.allowed and outcome.decision == "skipped"


def test_an_unstamped_pod_of_an_opted_in_cluster_is_not_gated_at_creation() -> None:
    """No legacy path: a Ray pod without the stamp is not the webhook's, even when its
    RayCluster opted in (the cluster was opted in before raykueue ran); the leader
    stamps that cluster and adopts its running pods (controller/adopt.py)."""
    review = rv.worker_review()
    outcome = run(review, PodContext(owners=(RAYCLUSTER,)))
    assert outcome.verdict.allowed and outcome.verdict.patch is None
    assert (outcome.decision, outcome.reason) == ("skipped", "not opted in")


def test_an_owner_missing_from_the_cache_never_denies_a_pod_that_is_not_stamped() -> None:
    review = with_queue(rv.worker_review())
    ctx = PodContext(unresolved_owner="RayCluster team-a/raycluster-gpu")
    outcome = run(review, ctx)
    assert outcome.verdict.allowed and outcome.verdict.patch is None
    assert outcome.reason == "not opted in"


def test_a_stamped_pod_whose_owner_is_missing_from_the_cache_is_retried() -> None:
    """It is opted in, and its queue or gang may live on the owner."""
    ctx = PodContext(unresolved_owner="RayCluster team-a/raycluster-gpu")
    outcome = run(opted_in(with_queue(rv.worker_review())), ctx)
    assert not outcome.verdict.allowed
    assert "RayCluster team-a/raycluster-gpu" in outcome.verdict.message
    assert "retried" in outcome.verdict.message
    assert run(bare(opted_in(with_queue(rv.worker_review())))).decision == "gated"


# --- queue ------------------------------------------------------------------


def test_pod_queue_label_wins_over_raycluster() -> None:
    review = with_queue(rv.worker_review(), "special")
    outcome = run(review, PodContext(owners=(RAYCLUSTER,)))
    assert patched(review, outcome)["metadata"]["labels"][c.QUEUE_LABEL] == "special"


def test_namespace_default_local_queue_is_the_fallback() -> None:
    review = opted_in(rv.head_review())
    outcome = run(review, PodContext(default_queue_exists=True))
    assert patched(review, outcome)["metadata"]["labels"][c.QUEUE_LABEL] == "default"
    assert "default LocalQueue" in outcome.reason


def test_no_queue_is_denied_naming_the_annotation_the_docs_use() -> None:
    outcome = run(opted_in(rv.head_review()), PodContext())
    assert not outcome.verdict.allowed
    # README and examples name the queue with the annotation (the label on a Ray object
    # is moved to it, which GitOps sees as drift): the advice must say the same.
    assert f"set annotation {c.QUEUE_ANNOTATION}=" in outcome.verdict.message
    assert c.QUEUE_LABEL not in outcome.verdict.message
    assert "RayCluster raycluster-gpu" in outcome.verdict.message
    assert 'LocalQueue named "default"' in outcome.verdict.message


@pytest.mark.parametrize("queue", ["Team-A", "team_a", "-team", "a" * 254])
def test_queue_that_is_not_a_dns_subdomain_is_denied(queue: str) -> None:
    outcome = run(opted_in(with_queue(rv.head_review(), queue)))
    assert not outcome.verdict.allowed
    assert "DNS-1123 subdomain" in outcome.verdict.message


def test_an_invalid_queue_annotation_is_named_as_the_annotation() -> None:
    review = opted_in(rv.head_review())
    review["request"]["object"]["metadata"].setdefault("annotations", {})[c.QUEUE_ANNOTATION] = "Team-A"
    outcome = run(review)
    assert not outcome.verdict.allowed
    assert outcome.verdict.message.startswith(f"{c.QUEUE_ANNOTATION}='Team-A' (from pod annotation)")


@pytest.mark.parametrize(
    ("value", "valid"),
    [("team-a", True), ("a.b-c", True), ("a", True), ("A", False), ("a..b", False), ("", False)],
)
def test_dns1123_subdomain(value: str, valid: bool) -> None:
    assert is_dns1123_subdomain(value) is valid


# --- priority ---------------------------------------------------------------


def test_head_and_worker_get_their_default_priority_classes() -> None:
    for review, expected in ((rv.head_review(), "ray-head"), (rv.worker_review(), "ray-worker")):
        review = opted_in(with_queue(review))
        pod = patched(review, run(review))
        assert pod["metadata"]["labels"][c.PRIORITY_CLASS_LABEL] == expected


def test_priority_defaults_are_configurable() -> None:
    review = opted_in(with_queue(rv.worker_review()))
    pod = patched(review, run(review, policy=PriorityPolicy("vip-head", "spot-worker")))
    assert pod["metadata"]["labels"][c.PRIORITY_CLASS_LABEL] == "spot-worker"


@pytest.mark.parametrize("role", ["worker", "head"])
def test_a_worker_may_not_name_a_head_only_priority_class(role: str) -> None:
    review = rv.head_review() if role == "head" else rv.worker_review()
    review = rv.set_label(opted_in(with_queue(review)), c.PRIORITY_CLASS_LABEL, "ray-head")
    outcome = run(review)
    if role == "head":
        assert outcome.decision == "gated"
        return
    assert not outcome.verdict.allowed
    assert "ray-head" in outcome.verdict.message and "only Ray heads" in outcome.verdict.message
    strict = PriorityPolicy(head_only_priority_classes=frozenset({"gold"}))
    assert not run(rv.set_label(review, c.PRIORITY_CLASS_LABEL, "gold"), policy=strict).verdict.allowed
    assert run(review, policy=strict).decision == "gated"


def test_explicit_priority_label_on_pod_wins() -> None:
    review = rv.set_label(opted_in(with_queue(rv.head_review())), c.PRIORITY_CLASS_LABEL, "urgent")
    pod = patched(review, run(review))
    assert pod["metadata"]["labels"][c.PRIORITY_CLASS_LABEL] == "urgent"


def test_pod_priority_class_is_set_only_when_configured() -> None:
    review = opted_in(with_queue(rv.head_review()))
    assert "priorityClassName" not in patched(review, run(review))["spec"]
    policy = PriorityPolicy(pod_priority=PodPriority("ray-head-pc", "ray-worker-pc"))
    ctx = PodContext(priority_values={"ray-head-pc": 100000})
    pod = patched(review, run(review, ctx, policy))
    assert pod["spec"]["priorityClassName"] == "ray-head-pc"
    assert pod["spec"]["priority"] == 100000


def test_unknown_pod_priority_class_is_a_warning_not_a_denial() -> None:
    review = opted_in(with_queue(rv.worker_review()))
    policy = PriorityPolicy(pod_priority=PodPriority("ray-head-pc", "ray-worker-pc"))
    outcome = run(review, PodContext(), policy)
    assert outcome.decision == "gated"
    assert "priorityClassName" not in patched(review, outcome)["spec"]
    assert any("ray-worker-pc" in w for w in outcome.verdict.warnings)


# --- gate -------------------------------------------------------------------


def _with_gate(review: dict[str, Any], name: str) -> dict[str, Any]:
    review = copy.deepcopy(review)
    rv.pod_of(review)["spec"].setdefault("schedulingGates", []).append({"name": name})
    return review


def test_gate_and_labels_are_added_and_nothing_else_changes() -> None:
    review = opted_in(with_queue(rv.worker_review()))
    before = rv.pod_of(review)
    pod = patched(review, run(review))
    assert gates(pod) == [c.GATE]
    assert pod["metadata"]["labels"][c.MANAGED_BY_LABEL] == c.MANAGED_BY_VALUE
    for key in ("labels", "schedulingGates"):
        pod["metadata"].pop(key, None)
        pod["spec"].pop(key, None)
    before = copy.deepcopy(before)
    before["metadata"].pop("labels")
    assert pod == before


def test_gate_is_appended_after_existing_gates() -> None:
    review = _with_gate(opted_in(with_queue(rv.worker_review())), "example.com/other")
    assert gates(patched(review, run(review))) == ["example.com/other", c.GATE]


def test_reinvocation_on_a_patched_pod_yields_an_empty_patch() -> None:
    review = opted_in(with_queue(rv.head_review()))
    once = patched(review, run(review))
    again = copy.deepcopy(review)
    again["request"]["object"] = once
    outcome = run(again)
    assert outcome.decision == "gated"
    assert outcome.verdict.patch is None
    assert gates(patched(again, outcome)) == [c.GATE]


def test_pod_without_labels_map_gets_one() -> None:
    review = opted_in(rv.head_review())
    pod = rv.pod_of(review)
    pod["metadata"]["labels"] = None
    outcome = run(review, PodContext(owners=(RAYCLUSTER,)))
    # No node-type label means it is not a Ray pod at all.
    assert outcome.decision == "skipped"


def test_generate_name_pod_has_no_name_or_uid_and_still_gets_gated() -> None:
    review = opted_in(with_queue(rv.worker_review()))
    meta = rv.pod_of(review)["metadata"]
    assert "name" not in meta and "uid" not in meta and meta["generateName"]
    outcome = run(review)
    assert outcome.decision == "gated"
    assert gates(patched(review, outcome)) == [c.GATE]


def test_dry_run_gets_exactly_the_same_answer() -> None:
    review = opted_in(with_queue(rv.head_review()))
    dry = copy.deepcopy(review)
    dry["request"]["dryRun"] = True
    uid = review["request"]["uid"]
    assert encode(uid, run(review).verdict) == encode(uid, run(dry).verdict)


def test_ray_owner_reads_the_controller_reference() -> None:
    assert ray_owner(rv.pod_of(rv.head_review())) == ("RayCluster", "raycluster-gpu")
    pod = rv.pod_of(rv.head_review())
    pod["metadata"]["ownerReferences"][0]["apiVersion"] = "example.com/v1"
    assert ray_owner(pod) is None
