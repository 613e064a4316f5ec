"""One opt-in rule, through the real API server: what raykueue refuses, and that the user reads why.

raykueue runs admission-only (its controller has tests of its own) beside a Kueue
Configuration of the test's own: `manageJobsWithoutQueueName` with Kueue's
documented label selector `kueue-managed=true`, which raykueue must judge by the
namespace's labels as its watch cache holds them.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from raykueue.core import contract as c
from testkit.api.scope import OPTED_IN, path, ray_object
from testkit.servers import RaykueueServer
from testkit.waiting import wait_for

MERGE = {"content_type": "application/merge-patch+json"}
MANAGED = {"kueue-managed": "true"}


@pytest.fixture(scope="module")
def kueue_namespace(api_stack) -> Iterator[str]:
    api = api_stack.api
    name = "kueue-opt-in-rule"
    api.call("POST", "/api/v1/namespaces",
             {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    cfg = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
           "manageJobsWithoutQueueName": True,
           "managedJobsNamespaceSelector": {"matchLabels": MANAGED},
           "integrations": {"frameworks": ["ray.io/raycluster", "ray.io/rayjob", "ray.io/rayservice", "pod"]}}
    api.call("POST", f"/api/v1/namespaces/{name}/configmaps", {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kueue-manager-config"},
        "data": {"controller_manager_config.yaml": yaml.safe_dump(cfg)}})
    try:
        yield name
    finally:
        api.delete(f"/api/v1/namespaces/{name}")


@pytest.fixture(scope="module")
def server(api_stack, kueue_namespace: str, tmp_path_factory) -> Iterator[RaykueueServer]:
    server = RaykueueServer(api_stack, tmp_path_factory.mktemp("raykueue-opt-in"), args=["--no-controller"],
                            env={"RAYKUEUE_KUEUE_NAMESPACE": kueue_namespace}).start()
    yield server
    server.close()


@pytest.fixture
def ns(new_namespace: Callable[..., str], server: RaykueueServer) -> str:
    return new_namespace("rule")


def denied(kubectl, obj: dict[str, Any], ns: str, *args: str) -> str:
    result = kubectl(*args or ("create",), "-n", ns, "-f", "-", input=json.dumps(obj))
    assert result.returncode != 0, result.stdout
    assert "denied the request" in result.stderr, result.stderr
    return result.stderr


def test_namespaces_are_judged_by_their_labels(api_stack, kubectl, new_namespace, server) -> None:
    """Kueue would admit an opted-in cluster whole in a namespace its selector picks by label."""
    api = api_stack.api
    managed = new_namespace("managed", labels=MANAGED)
    message = denied(kubectl, ray_object("RayCluster", "rc", annotations=OPTED_IN), managed)
    assert "manageJobsWithoutQueueName" in message and managed in message
    free = new_namespace("free")
    created = api.call("POST", path(free, "RayCluster"), ray_object("RayCluster", "rc", annotations=OPTED_IN))
    assert created["spec"]["headGroupSpec"]["template"]["metadata"]["labels"][c.OPTED_IN_LABEL] == "true"
    # The label arrives later: raykueue's namespace cache follows it.
    api.call("PATCH", f"/api/v1/namespaces/{free}", {"metadata": {"labels": MANAGED}}, **MERGE)

    def refused() -> bool:
        result = kubectl("create", "-n", free, "--dry-run=server", "-f", "-",
                         input=json.dumps(ray_object("RayCluster", "later", annotations=OPTED_IN)))
        return result.returncode != 0 and "manageJobsWithoutQueueName" in result.stderr

    wait_for(refused, timeout=30, message="raykueue to see the namespace's new label")


def test_an_opt_in_on_a_pod_template_is_refused_with_where_it_belongs(ns: str, kubectl) -> None:
    obj = ray_object("RayCluster", "rc")
    obj["spec"]["workerGroupSpecs"][0]["template"]["metadata"]["annotations"] = {
        c.STANDALONE_ANNOTATION: "false"}
    message = denied(kubectl, obj, ns)
    assert "workerGroupSpecs[0].template" in message and "metadata.annotations" in message


def test_the_opt_in_of_a_live_cluster_is_refused_unless_it_is_suspended(ns: str, kubectl, api_stack) -> None:
    api = api_stack.api
    rc = path(ns, "RayCluster", "rc")
    api.call("POST", path(ns, "RayCluster"), ray_object("RayCluster", "rc", annotations=OPTED_IN))
    drop = {"metadata": {"annotations": {c.STANDALONE_ANNOTATION: None}}}
    result = kubectl("patch", "raycluster", "rc", "-n", ns, "--type=merge", "-p", json.dumps(drop))
    assert result.returncode != 0 and "spec.suspend: true" in result.stderr, result.stderr
    api.call("PATCH", rc, {"spec": {"suspend": True}}, **MERGE)
    handed_back = api.call("PATCH", rc, drop, **MERGE)
    # Its stamps go with the opt-in: its pods are Kueue's from now on.
    assert c.OPTED_IN_LABEL not in handed_back["spec"]["headGroupSpec"]["template"]["metadata"].get(
        "labels", {})


def test_a_rayjob_whose_submitter_would_run_unaccounted_is_refused(ns: str, kubectl) -> None:
    """K8sJobMode is accounted with the head; on a cluster it did not make, it cannot be."""
    job = ray_object("RayJob", "job", annotations=OPTED_IN)
    del job["spec"]["submissionMode"]
    del job["spec"]["rayClusterSpec"]
    job["spec"]["suspend"] = False
    job["spec"]["clusterSelector"] = {"ray.io/cluster": "shared"}
    message = denied(kubectl, job, ns)
    assert "K8sJobMode" in message and "HTTPMode" in message and "spec.rayClusterSpec" in message


def test_a_change_of_submission_mode_is_followed(ns: str, kubectl, api_stack) -> None:
    """The RayJob webhook's conditions let a submissionMode patch through (issue 29: it
    did not): refused while the job may run, accounted while it is suspended."""
    api = api_stack.api
    job = ray_object("RayJob", "job", annotations=OPTED_IN, suspend=True)
    job["spec"]["submissionMode"] = "HTTPMode"
    created = api.call("POST", path(ns, "RayJob"), job)
    assert c.SUBMITTER_ANNOTATION not in created["metadata"]["annotations"]
    # Suspended: no cluster reserved anything, the next one is made from the new spec.
    to_k8s = {"spec": {"submissionMode": "K8sJobMode"}}
    changed = api.call("PATCH", path(ns, "RayJob", "job"), to_k8s, **MERGE)
    assert json.loads(changed["metadata"]["annotations"][c.SUBMITTER_ANNOTATION])["containers"][0][
        "resources"]["requests"] == {"cpu": "500m", "memory": "200Mi"}
    # A hand-made value is put back as the spec says.
    forged = {"metadata": {"annotations": {c.SUBMITTER_ANNOTATION: '{"containers":[{"name":"x"}]}'}}}
    kept = api.call("PATCH", path(ns, "RayJob", "job"), forged, **MERGE)
    assert kept["metadata"]["annotations"][c.SUBMITTER_ANNOTATION] == changed["metadata"]["annotations"][
        c.SUBMITTER_ANNOTATION]
    api.call("PATCH", path(ns, "RayJob", "job"), {"spec": {"suspend": False}}, **MERGE)
    result = kubectl("patch", "rayjob", "job", "-n", ns, "--type=merge", "-p",
                     json.dumps({"spec": {"submissionMode": "HTTPMode"}}))
    assert result.returncode != 0, result.stdout
    for needed in ("K8sJobMode -> HTTPMode", "spec.suspend: true", "shutdownAfterJobFinishes"):
        assert needed in result.stderr, result.stderr


def test_a_worker_may_not_claim_the_heads_priority(ns: str, kubectl) -> None:
    obj = ray_object("RayCluster", "rc", annotations=OPTED_IN)
    obj["spec"]["workerGroupSpecs"][0]["template"]["metadata"]["labels"] = {
        c.PRIORITY_CLASS_LABEL: c.DEFAULT_HEAD_PRIORITY_CLASS}
    message = denied(kubectl, obj, ns)
    assert "worker group cpu" in message and "only Ray heads" in message


def test_a_multikueue_managed_by_from_the_user_is_refused(ns: str, kubectl) -> None:
    obj = ray_object("RayCluster", "rc", annotations=OPTED_IN)
    obj["spec"]["managedBy"] = c.MULTIKUEUE_MANAGED_BY
    assert "spec.managedBy" in denied(kubectl, obj, ns)
    ok = copy.deepcopy(obj)
    ok["spec"]["managedBy"] = c.KUBERAY_MANAGED_BY
    result = kubectl("create", "-n", ns, "--dry-run=server", "-f", "-", input=json.dumps(ok))
    assert result.returncode == 0, result.stderr
