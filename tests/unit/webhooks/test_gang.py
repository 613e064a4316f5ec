"""Gang opt-in at the pod webhook: which pods are marked, with what base counts."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from raykueue.controller.caches import slim_raycluster
from raykueue.core import contract as c
from raykueue.webhooks.classify import PodContext
from testkit import reviews as rv
from testkit.unit.webhooks_mutate import RAYCLUSTER, patched, run


def stamped(review: dict) -> dict:
    """A pod of an opted-in RayCluster carries the stamp from its template."""
    return rv.set_label(review, c.OPTED_IN_LABEL, c.OPTED_IN_VALUE)

def _cluster(gang: str | None, groups: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    cluster = copy.deepcopy(RAYCLUSTER)
    if gang is not None:
        cluster["metadata"]["annotations"][c.GANG_ANNOTATION] = gang
    full = {**cluster, "spec": {"workerGroupSpecs": groups if groups is not None else [
        {"groupName": "small", "minReplicas": 4, "replicas": 6, "template": {"big": "x" * 100}},
        {"groupName": "multi", "minReplicas": 2, "numOfHosts": 2},
        {"groupName": "idle", "minReplicas": 0}]}}
    # As the one RayCluster watch keeps it, which the webhook and the controller share.
    return slim_raycluster(full)


def test_the_cache_keeps_only_the_worker_groups_sizes() -> None:
    kept = _cluster("true")
    assert kept["spec"] == {"workerGroupSpecs": [
        {"groupName": "small", "minReplicas": 4},
        {"groupName": "multi", "minReplicas": 2, "numOfHosts": 2},
        {"groupName": "idle", "minReplicas": 0}]}


def test_gang_pods_carry_their_cluster_and_every_groups_base_count() -> None:
    review = stamped(rv.worker_review())
    outcome = run(review, PodContext(owners=(_cluster("true"),)))
    pod = patched(review, outcome)
    assert outcome.decision == "gated"
    assert pod["metadata"]["labels"][c.GANG_LABEL] == pod["metadata"]["labels"][c.CLUSTER_LABEL]
    assert json.loads(pod["metadata"]["annotations"][c.GANG_MIN_ANNOTATION]) == {
        "small": 4, "multi": 4, "idle": 0}


@pytest.mark.parametrize("gang", [None, "false"])
def test_without_the_opt_in_pods_are_gated_as_before(gang: str | None) -> None:
    review = stamped(rv.worker_review())
    outcome = run(review, PodContext(owners=(_cluster(gang),)))
    pod = patched(review, outcome)
    assert outcome.decision == "gated"
    assert c.GANG_LABEL not in pod["metadata"]["labels"]
    assert c.GANG_MIN_ANNOTATION not in (pod["metadata"].get("annotations") or {})


def test_the_nearest_owner_decides() -> None:
    rayjob = {"kind": "RayJob", "metadata": {"name": "train", "annotations": {
        c.GANG_ANNOTATION: "true"}}}
    review = stamped(rv.worker_review())
    off = run(review, PodContext(owners=(_cluster("false"), rayjob)))
    assert c.GANG_LABEL not in patched(review, off)["metadata"]["labels"]
    on = run(review, PodContext(owners=(_cluster(None), rayjob)))
    assert c.GANG_LABEL in patched(review, on)["metadata"]["labels"]


def test_an_invalid_value_is_denied_naming_the_owner_and_the_values() -> None:
    outcome = run(stamped(rv.worker_review()), PodContext(owners=(_cluster("yes"),)))
    assert not outcome.verdict.allowed
    message = outcome.verdict.message
    assert c.GANG_ANNOTATION in message and "RayCluster raycluster-gpu" in message
    assert '"true"' in message and '"false"' in message


def test_a_cluster_with_no_worker_groups_is_a_gang_of_its_head_alone() -> None:
    """workerGroupSpecs is optional in KubeRay's RayCluster: a head-only cluster, whose
    slimmed copy keeps no spec at all, is admitted as a gang of no worker group."""
    cluster = copy.deepcopy(RAYCLUSTER)
    cluster["metadata"]["annotations"][c.GANG_ANNOTATION] = "true"
    cluster = slim_raycluster({**cluster, "spec": {"headGroupSpec": {}}})
    assert "spec" not in cluster
    review = stamped(rv.head_review())
    pod = patched(review, run(review, PodContext(owners=(cluster,))))
    assert pod["metadata"]["annotations"][c.GANG_MIN_ANNOTATION] == "{}"
