"""Kueue's WorkloadPriorityClassDefaulting beside raykueue.

With the gate on (alpha and off in Kueue v0.18-v0.19, on by default from v0.20 per
its release notes) and a WorkloadPriorityClass named `default`, Kueue's job and pod
webhooks label every job and pod that names no class `kueue.x-k8s.io/priority-class:
default` (jobframework ApplyDefaultWorkloadPriorityClass, called from the RayCluster,
RayJob, RayService and pod webhooks). raykueue's priority rule gives heads and workers
their own classes unless the pod names one: Kueue's default must not count as a pod's
own choice, and an opted-in cluster must stay raykueue's.

Where the stack's Kueue ships the gate off, this module turns it on (Kueue's config
file rewritten and Kueue restarted) and puts Kueue back as it was after.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

import devstack
from devstack.kueue.shipped import feature_gate_default, kueue_module_dir
from raykueue.core import contract as c
from raykueue.kube.rest import ApiError, Rest
from testkit.e2e.controller import RAYCLUSTERS, WORKLOADS, admin, controller, queue, webhooks  # noqa: F401 - fixtures
from testkit.e2e.kueue_restart import restart_kueue
from testkit.e2e.kueue_shipped import no_kueue_workload_for, opted_in_cluster, raykueue_runs_it, watched
from testkit.pods import role
from testkit.standins import WPCS

GATE = "WorkloadPriorityClassDefaulting"


@pytest.fixture(scope="module")
def defaulting(e2e_stack: devstack.Stack, admin: Rest) -> Iterator[bool]:  # noqa: F811
    """Kueue with the gate on and WorkloadPriorityClass `default`; yields whether the gate
    had to be turned on (False: this Kueue ships it on)."""
    version = e2e_stack.config.kueue_version
    shipped_on = feature_gate_default(kueue_module_dir(version), GATE)
    if shipped_on is None:
        pytest.skip(f"Kueue {version} has no {GATE} gate")
    config_file = e2e_stack.dir / "kueue" / "config.yaml"
    original = config_file.read_text()
    if not shipped_on:
        config = yaml.safe_load(original)
        config.setdefault("featureGates", {})[GATE] = True
        config_file.write_text(yaml.safe_dump(config, sort_keys=False))
        restart_kueue(e2e_stack)
    admin.create(WPCS.path(), {"apiVersion": WPCS.api_version, "kind": "WorkloadPriorityClass",
                               "metadata": {"name": c.KUEUE_DEFAULT_PRIORITY_CLASS}, "value": 500,
                               "description": "what Kueue's defaulting gives every job"})
    try:
        yield not shipped_on
    finally:
        try:
            admin.delete(WPCS.path(None, c.KUEUE_DEFAULT_PRIORITY_CLASS))
        except ApiError as e:
            if not e.is_not_found:
                raise
        if not shipped_on:
            config_file.write_text(original)
            restart_kueue(e2e_stack)


def job(queue_name: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"generateName": "defaulted-", "labels": {c.QUEUE_LABEL: queue_name}},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1m"}}}]}}}}


def test_kueue_defaults_a_jobs_class(admin, defaulting, queue):  # noqa: F811
    """The control: Kueue's defaulting is on, so the tests below are not vacuous."""
    ns = queue(cpu="1", memory="1Gi")
    stored = admin.create(f"/apis/batch/v1/namespaces/{ns}/jobs", job("team-a"), {"dryRun": "All"})
    assert stored["metadata"]["labels"][c.PRIORITY_CLASS_LABEL] == c.KUEUE_DEFAULT_PRIORITY_CLASS


def classes(admin: Rest, s: dict[str, Any]) -> dict[str, set[tuple[str, str, str]]]:  # noqa: F811
    """role -> {(pod's class label, its Workload's class, priority)}."""
    out: dict[str, set[tuple[str, str, str]]] = {}
    for p in s["pods"]:
        (wl,) = s["owned"][p["metadata"]["uid"]]
        out.setdefault(role(p), set()).add((p["metadata"]["labels"][c.PRIORITY_CLASS_LABEL],
                                            wl["spec"]["priorityClassRef"]["name"],
                                            str(wl["spec"]["priority"])))
    return out


@pytest.mark.parametrize("queue_label", [True, False], ids=["queue-label", "default-local-queue"])
def test_an_opted_in_cluster_keeps_the_head_and_worker_classes(admin, defaulting, controller, queue,  # noqa: F811
                                                               queue_label: bool):
    local_queue = "team-a" if queue_label else "default"
    ns = queue(cpu="3", memory="3Gi", local_queue=local_queue)
    with watched(admin, ns):
        admin.create(RAYCLUSTERS.path(ns), opted_in_cluster("rc", 2, queue_label=queue_label))
        stored = admin.get(RAYCLUSTERS.path(ns, "rc"))
        assert not stored["spec"].get("suspend")
        # Kueue's RayCluster webhook labels the cluster itself (KubeRay does not copy a
        # RayCluster's labels to its pods, and Kueue's pod webhook skips pods whose
        # controller is a kind it integrates), so the pods name no class of their own.
        assert stored["metadata"]["labels"][c.PRIORITY_CLASS_LABEL] == c.KUEUE_DEFAULT_PRIORITY_CLASS
        s = raykueue_runs_it(admin, ns, "rc", 2, 0, local_queue)
        assert classes(admin, s) == {"head": {("ray-head", "ray-head", "1000")},
                                     "worker": {("ray-worker", "ray-worker", "100")}}
        no_kueue_workload_for(admin, ns, "RayCluster", "rc")


def test_a_bare_opted_in_pod_labelled_default_by_kueue_gets_the_worker_class(
        admin, defaulting, webhooks, queue):  # noqa: F811
    """A pod with no owner passes Kueue's pod webhook first, which defaults its class; raykueue
    takes the pod back and must not read Kueue's default as the pod's own choice."""
    ns = queue(cpu="1", memory="1Gi")
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"generateName": "bare-", "labels": {c.NODE_TYPE_LABEL: c.ROLE_WORKER,
                                                            c.QUEUE_LABEL: "team-a"},
                        "annotations": {c.STANDALONE_ANNOTATION: "true"}},
           "spec": {"containers": [{"name": "c", "image": "busybox",
                                    "resources": {"requests": {"cpu": "100m"}}}]}}
    stored = admin.create(f"/api/v1/namespaces/{ns}/pods", pod, {"dryRun": "All"})
    assert c.GATE in [g["name"] for g in stored["spec"].get("schedulingGates") or []]
    assert stored["metadata"]["labels"][c.PRIORITY_CLASS_LABEL] == "ray-worker"
