"""K8sJobMode under quota: the submitter pod's slot reserved with the head (core/submitter.py).

The description goes RayJob (first webhook) -> RayCluster (KubeRay copies the
RayJob's annotations, played here) -> head template (the RayCluster's first
webhook) -> head pod -> the head's Workload (a second podSet). Every step is a
pure function, so the whole way is checked without servers.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import pytest

from raykueue.controller import caches
from raykueue.controller import workload as w
from raykueue.controller import workload_match as wm
from raykueue.core import contract as c
from raykueue.core import submitter
from raykueue.webhooks.rayobjects import Stage
from testkit import controller_objects as o
from testkit.unit.webhooks_rayobjects import OPTED_IN, outcome, ray_object, refusal, through

DEFAULT = {"containers": [{
    "name": "ray-job-submitter",
    "resources": {"requests": {"cpu": "500m", "memory": "200Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}}]}


HEAD = w.Priority("ray-head", 100)


def k8s_job(**spec: Any) -> dict[str, Any]:
    """An opted-in RayJob as Ray's documentation writes it: no submissionMode (K8sJobMode)."""
    obj = ray_object("RayJob", annotations=OPTED_IN)
    del obj["spec"]["submissionMode"]
    obj["spec"].update(spec)
    return obj


def kuberay_cluster_of(rayjob: dict[str, Any]) -> dict[str, Any]:
    """What KubeRay v1.6 creates for a RayJob (constructRayClusterForRayJob): its
    labels and annotations copied, its rayClusterSpec as the spec."""
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "rc-abcde", "namespace": "team-a",
                         "labels": dict(rayjob["metadata"].get("labels") or {}),
                         "annotations": dict(rayjob["metadata"].get("annotations") or {})},
            "spec": copy.deepcopy(rayjob["spec"]["rayClusterSpec"])}


def head_pod_from(cluster: dict[str, Any]) -> dict[str, Any]:
    head = o.pod(c.ROLE_HEAD)
    head["metadata"].setdefault("annotations", {}).update(
        cluster["spec"]["headGroupSpec"]["template"]["metadata"].get("annotations") or {})
    return head


# --- the RayJob's webhook ---------------------------------------------------------------

def test_a_submitter_pod_template_is_reserved_as_written() -> None:
    template = {"metadata": {"labels": {"x": "y"}}, "spec": {
        "containers": [{"name": "submit", "image": "rayproject/ray:2.9", "command": ["ray", "job", "submit"],
                        "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}],
        "initContainers": [{"name": "log-shipper", "restartPolicy": "Always", "image": "x",
                            "resources": {"requests": {"cpu": "100m"}}}],
        "tolerations": [{"key": "batch", "operator": "Exists"}], "restartPolicy": "Never"}}
    out = through(k8s_job(submitterPodTemplate=template), Stage.FIRST)
    assert json.loads(out["metadata"]["annotations"][c.SUBMITTER_ANNOTATION]) == {
        "containers": [{"name": "submit", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}],
        "initContainers": [{"name": "log-shipper", "restartPolicy": "Always",
                            "resources": {"requests": {"cpu": "100m"}}}],
        "tolerations": [{"key": "batch", "operator": "Exists"}]}


@pytest.mark.parametrize("mode", ["SidecarMode", "HTTPMode", "InteractiveMode"])
def test_a_mode_without_a_submitter_pod_reserves_nothing_and_a_hand_written_value_goes(mode: str) -> None:
    obj = k8s_job(submissionMode=mode)
    obj["metadata"]["annotations"][c.SUBMITTER_ANNOTATION] = json.dumps(DEFAULT)
    out = through(obj, Stage.FIRST)
    assert c.SUBMITTER_ANNOTATION not in out["metadata"]["annotations"]


def test_a_hand_written_value_is_replaced_by_the_specs() -> None:
    obj = k8s_job()
    obj["metadata"]["annotations"][c.SUBMITTER_ANNOTATION] = '{"containers":[{"name":"tiny"}]}'
    out = through(obj, Stage.FIRST)
    assert json.loads(out["metadata"]["annotations"][c.SUBMITTER_ANNOTATION]) == DEFAULT


def test_k8sjobmode_on_an_existing_cluster_is_refused_with_every_way_out() -> None:
    message = refusal(k8s_job(clusterSelector={"ray.io/cluster": "shared"}))
    for needed in ("K8sJobMode", "clusterSelector", "HTTPMode", "SidecarMode is not allowed",
                   "spec.rayClusterSpec"):
        assert needed in message, message
    # HTTPMode on an existing cluster runs no pod: nothing to reserve.
    assert outcome(k8s_job(clusterSelector={"ray.io/cluster": "shared"}, submissionMode="HTTPMode"),
                   Stage.FIRST).verdict.allowed


@pytest.mark.parametrize(("before", "after"), [
    ("HTTPMode", None), (None, "HTTPMode"), ("SidecarMode", "K8sJobMode"), (None, "template")])
def test_what_the_submitter_costs_changes_only_while_suspended(before: str | None, after: str | None) -> None:
    def job(mode: str | None, suspend: bool) -> dict[str, Any]:
        obj = through(k8s_job(shutdownAfterJobFinishes=True, suspend=suspend), Stage.FIRST)
        if mode == "template":
            obj["spec"]["submitterPodTemplate"] = {"spec": {"containers": [
                {"name": "s", "resources": {"requests": {"cpu": "3"}}}]}}
        elif mode is not None:
            obj["spec"]["submissionMode"] = mode
        return obj

    old, new = job(before, False), job(after, False)
    message = refusal(new, "UPDATE", old)
    for needed in ("may not change while it runs", "spec.suspend: true", "shutdownAfterJobFinishes: true",
                   "another update", "spec.suspend: false", "500m CPU / 200Mi"):
        assert needed in message, message
    # Half way (suspending in the same update) is still refused: the cluster may run.
    assert refusal(job(after, True), "UPDATE", old)
    old, new = job(before, True), job(after, True)
    out = through(new, Stage.FIRST, "UPDATE", old)
    assert (out["metadata"]["annotations"].get(c.SUBMITTER_ANNOTATION)
            == submitter.encode(submitter.pod_spec(new)))


def test_a_refused_change_to_sidecar_mode_says_what_kuberay_needs_of_it() -> None:
    """Following the refusal must not meet KubeRay's own validation next."""
    old = through(k8s_job(shutdownAfterJobFinishes=True), Stage.FIRST)
    new = copy.deepcopy(old)
    new["spec"]["submissionMode"] = "SidecarMode"
    message = refusal(new, "UPDATE", old)
    for needed in ("K8sJobMode -> SidecarMode", "spec.suspend: true", "spec.submitterPodTemplate",
                   "spec.submitterConfig", "spec.clusterSelector", "restartPolicy Never"):
        assert needed in message, message
    new["spec"]["submissionMode"] = "HTTPMode"
    assert "restartPolicy" not in refusal(new, "UPDATE", old)  # nothing asked of HTTPMode


def test_a_rayjobs_refused_opt_in_change_says_how_kuberay_lets_it_be_suspended() -> None:
    old = through(k8s_job(), Stage.FIRST)
    new = copy.deepcopy(old)
    new["metadata"]["annotations"][c.STANDALONE_ANNOTATION] = "false"
    message = refusal(new, "UPDATE", old)
    for needed in ("spec.suspend: true", "spec.shutdownAfterJobFinishes: true",
                   "without spec.clusterSelector"):
        assert needed in message, message


def test_an_update_that_leaves_the_submitter_alone_is_not_refused() -> None:
    old = through(k8s_job(), Stage.FIRST)
    new = copy.deepcopy(old)
    new["spec"]["entrypoint"] = "python other.py"
    new["spec"]["submitterConfig"] = {"backoffLimit": 5}
    assert outcome(new, Stage.FIRST, "UPDATE", old).verdict.allowed


# --- onwards to the head pod's Workload -------------------------------------------------

def test_the_whole_way_from_the_rayjob_to_the_heads_workload() -> None:
    rayjob = through(k8s_job(), Stage.FIRST)
    cluster = through(kuberay_cluster_of(rayjob), Stage.FIRST)
    head_template = cluster["spec"]["headGroupSpec"]["template"]
    assert head_template["metadata"]["annotations"][c.SUBMITTER_ANNOTATION] == rayjob["metadata"][
        "annotations"][c.SUBMITTER_ANNOTATION]
    for worker in cluster["spec"]["workerGroupSpecs"]:
        meta = worker["template"].get("metadata") or {}
        assert c.SUBMITTER_ANNOTATION not in (meta.get("annotations") or {})

    head = head_pod_from(cluster)
    wl = w.build_workload(head, HEAD)
    main, reserved = wl["spec"]["podSets"]
    assert (main["name"], main["count"]) == (w.POD_SET, 1)
    assert reserved == {"name": "submitter", "count": 1, "template": {"spec": DEFAULT}}
    # One Workload, one priority: the submitter's slot is admitted (or preempted) with its head.
    assert wl["spec"]["priority"] == 100
    assert wm.mismatch(wl, head) is None
    assert wm.mismatch(wl, caches.slim_pod(head)) is None  # as the controller's cache holds it
    assert wm.mismatch(caches.slim_workload(wl), caches.slim_pod(head)) is None


def test_a_workload_without_the_submitters_slot_is_not_the_heads() -> None:
    rayjob = through(k8s_job(), Stage.FIRST)
    head = head_pod_from(through(kuberay_cluster_of(rayjob), Stage.FIRST))
    forged = w.build_workload(head, HEAD)
    forged["spec"]["podSets"] = forged["spec"]["podSets"][:1]
    assert wm.mismatch(forged, head) == "its podSets do not request what the pod requests"
    smaller = w.build_workload(head, HEAD)
    smaller["spec"]["podSets"][1]["template"]["spec"]["containers"][0]["resources"] = {}
    assert wm.mismatch(smaller, head) == "its podSets do not request what the pod requests"


def test_a_head_template_keeps_no_slot_its_cluster_does_not_carry() -> None:
    cluster = ray_object("RayCluster", annotations=OPTED_IN)
    cluster["spec"]["headGroupSpec"]["template"]["metadata"]["annotations"] = {
        c.SUBMITTER_ANNOTATION: json.dumps(DEFAULT)}
    out = through(cluster, Stage.FIRST)
    assert c.SUBMITTER_ANNOTATION not in out["spec"]["headGroupSpec"]["template"]["metadata"]["annotations"]


def test_a_head_template_without_metadata_gets_the_stamp_and_the_slot() -> None:
    cluster = ray_object("RayCluster", annotations={**OPTED_IN, c.SUBMITTER_ANNOTATION: json.dumps(DEFAULT)})
    del cluster["spec"]["headGroupSpec"]["template"]["metadata"]
    answer = outcome(cluster, Stage.FIRST)
    out = jsonpatch.apply_patch(cluster, answer.verdict.patch)
    meta = out["spec"]["headGroupSpec"]["template"]["metadata"]
    assert meta["labels"][c.OPTED_IN_LABEL] == c.OPTED_IN_VALUE
    assert meta["annotations"][c.SUBMITTER_ANNOTATION] == json.dumps(DEFAULT)


@pytest.mark.parametrize("value", ["", "not json", "[]", '{"containers": []}', '{"containers": [1]}',
                                   '{"containers": [{"image": "x"}]}'])
def test_a_value_that_is_no_pod_spec_reserves_nothing(value: str) -> None:
    head = o.pod(c.ROLE_HEAD)
    head["metadata"].setdefault("annotations", {})[c.SUBMITTER_ANNOTATION] = value
    assert len(w.build_workload(head, HEAD)["spec"]["podSets"]) == 1
    assert wm.mismatch(w.build_workload(head, HEAD), head) is None


def test_only_a_head_reserves_a_submitter() -> None:
    worker = o.pod(c.ROLE_WORKER)
    worker["metadata"].setdefault("annotations", {})[c.SUBMITTER_ANNOTATION] = json.dumps(DEFAULT)
    assert len(w.build_workload(worker, HEAD)["spec"]["podSets"]) == 1


def test_k8sjobmode_with_gang_start_is_refused_with_every_way_out() -> None:
    obj = k8s_job()
    obj["metadata"]["annotations"][c.GANG_ANNOTATION] = "true"
    message = refusal(obj)
    for needed in ("gang", "K8sJobMode", "HTTPMode", "SidecarMode", "submitterPodTemplate", "submitterConfig",
                   "spec.clusterSelector", "restartPolicy Never", "remove the gang annotation"):
        assert needed in message, message
    obj["spec"]["submissionMode"] = "SidecarMode"
    assert outcome(obj, Stage.FIRST).verdict.allowed
