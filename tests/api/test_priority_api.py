"""Head priority only for a real head, and the owner's priority-class label, on the real API server.

Issue 29: a pod with no Ray owner, labelled `ray.io/node-type: head` and opted in,
was stored with `kueue.x-k8s.io/priority-class: ray-head`, the class that preempts
other clusters' heads. Now it gets the worker class and the user reads why (an
admission warning), or, naming a head-only class itself, is refused with what to
change. The Ray owner's `kueue.x-k8s.io/priority-class` label (where Kueue reads a
job's priority, and where platform policies set it) is honoured within that rule.
KubeRay is not needed: pods are created as KubeRay makes them (controller owner
reference, the template's stamp).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from raykueue.core import contract as c
from testkit.api.admission import create, opted_in_pod, ray_pod, start_server
from testkit.servers import RaykueueServer
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture
from testkit.waiting import wait_for

HEAD, WORKER = c.DEFAULT_HEAD_PRIORITY_CLASS, c.DEFAULT_WORKER_PRIORITY_CLASS


@pytest.fixture(scope="module")
def server(api_stack, tmp_path_factory) -> Iterator[RaykueueServer]:
    server = start_server(api_stack, tmp_path_factory)
    yield server
    server.close()


@pytest.fixture
def ns(new_namespace, server) -> str:  # noqa: F811
    return new_namespace("prio")


def test_a_bare_pod_calling_itself_a_head_gets_the_worker_class_and_a_warning(ns: str, kubectl) -> None:
    result = create(kubectl, opted_in_pod(ns, "head"))
    assert result.returncode == 0, result.stderr
    pod = json.loads(result.stdout)
    assert pod["metadata"]["labels"][c.PRIORITY_CLASS_LABEL] == WORKER
    assert "Warning:" in result.stderr and "no RayCluster owns it" in result.stderr, result.stderr


def test_a_bare_pod_naming_the_head_class_is_refused_with_what_to_change(ns: str, kubectl) -> None:
    pod = opted_in_pod(ns, "head")
    pod["metadata"]["labels"][c.PRIORITY_CLASS_LABEL] = HEAD
    result = create(kubectl, pod)
    assert result.returncode != 0 and "denied the request" in result.stderr
    assert "no RayCluster owns it" in result.stderr and "remove the label" in result.stderr


def raycluster(api, ns: str, name: str, priority_class: str) -> dict[str, Any]:
    return api.call("POST", f"/apis/ray.io/v1/namespaces/{ns}/rayclusters", {
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": name, "labels": {c.QUEUE_LABEL: "team-a",
                                              c.PRIORITY_CLASS_LABEL: priority_class},
                     "annotations": {c.STANDALONE_ANNOTATION: "true"}},
        "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [
            {"name": "ray-head", "image": "rayproject/ray:2.46.0"}]}}}},
    })


def kuberay_pod(kubectl, ns: str, cluster: dict[str, Any], role: str) -> tuple[dict[str, Any], str]:
    """A pod as KubeRay makes it for `cluster`, dry-run; waits for raykueue's cache of the cluster."""
    owner = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": cluster["metadata"]["name"],
             "uid": cluster["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    pod = ray_pod(ns, role, owner=owner, labels={c.OPTED_IN_LABEL: c.OPTED_IN_VALUE,
                                                  c.CLUSTER_LABEL: cluster["metadata"]["name"]})

    def stored() -> tuple[dict[str, Any], str] | None:
        result = create(kubectl, pod, "--dry-run=server")
        return (json.loads(result.stdout), result.stderr) if result.returncode == 0 else None

    # Denied (KubeRay retries) until the RayCluster is in raykueue's cache: wait for that.
    return wait_for(stored, timeout=20, message=f"{role} of RayCluster {cluster['metadata']['name']}")


def test_the_owners_label_is_honoured_for_head_and_workers(ns: str, kubectl, api_stack) -> None:
    cluster = raycluster(api_stack.api, ns, "team-high", "team-high")
    for role in ("head", "worker"):
        pod, warnings = kuberay_pod(kubectl, ns, cluster, role)
        assert pod["metadata"]["labels"][c.PRIORITY_CLASS_LABEL] == "team-high", role
        assert "Warning:" not in warnings


def test_a_head_only_class_on_the_owner_reaches_its_head_only(ns: str, kubectl, api_stack) -> None:
    cluster = raycluster(api_stack.api, ns, "headed", HEAD)
    head, warnings = kuberay_pod(kubectl, ns, cluster, "head")
    assert head["metadata"]["labels"][c.PRIORITY_CLASS_LABEL] == HEAD and "Warning:" not in warnings
    worker, warnings = kuberay_pod(kubectl, ns, cluster, "worker")
    assert worker["metadata"]["labels"][c.PRIORITY_CLASS_LABEL] == WORKER
    assert "Warning:" in warnings and "RayCluster" in warnings, warnings
