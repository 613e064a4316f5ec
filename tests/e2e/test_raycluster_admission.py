"""KubeRay's real operator creates the pods; the real API server sends them to raykueue."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from raykueue.core import contract as c
from testkit.reviews import gates
from testkit.servers import RaykueueServer
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture
from testkit.waiting import wait_for


def raycluster(name: str, workers: int, annotations: dict[str, str]) -> dict[str, Any]:
    container = {"image": "rayproject/ray:2.46.0",
                 "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                               "limits": {"cpu": "1", "memory": "1Gi"}}}
    return {
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": name, "labels": {c.QUEUE_LABEL: "team-a"},
                     "annotations": annotations},
        "spec": {
            "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {
                "containers": [{"name": "ray-head", **container}]}}},
            "workerGroupSpecs": [{
                "groupName": "cpu", "replicas": workers, "minReplicas": 0, "maxReplicas": 10,
                "rayStartParams": {},
                "template": {"spec": {"containers": [{"name": "ray-worker", **container}]}},
            }],
        },
    }


@pytest.fixture(scope="module")
def server(e2e_stack, tmp_path_factory) -> Iterator[RaykueueServer]:
    # Admission only: without the controller, gated pods stay gated, which is
    # what this module asserts. The controller's own e2e tests lift the gates.
    server = RaykueueServer(e2e_stack, tmp_path_factory.mktemp("raykueue"),
                            args=["--no-controller"]).start()
    yield server
    server.close()


def pods_of(kubectl, ns: str, cluster: str) -> list[dict[str, Any]]:
    result = kubectl("get", "pods", "-n", ns, "-l", f"{c.CLUSTER_LABEL}={cluster}", "-o", "json",
                     check=True)
    return json.loads(result.stdout)["items"]


def test_raycluster_pods_from_kuberay_arrive_gated(server, new_namespace, kubectl) -> None:  # noqa: F811
    ns = new_namespace("e2e")
    manifest = raycluster("gated", 2, {c.STANDALONE_ANNOTATION: "true"})
    kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(manifest), check=True)
    pods = wait_for(lambda: (p := pods_of(kubectl, ns, "gated")) and len(p) == 3 and p,
                    timeout=60, message="KubeRay to create 1 head and 2 workers")
    roles = sorted(p["metadata"]["labels"][c.NODE_TYPE_LABEL] for p in pods)
    assert roles == ["head", "worker", "worker"]
    for pod in pods:
        labels = pod["metadata"]["labels"]
        assert gates(pod) == [c.GATE], pod["metadata"]["name"]
        assert labels[c.QUEUE_LABEL] == "team-a"
        expected = "ray-head" if labels[c.NODE_TYPE_LABEL] == "head" else "ray-worker"
        assert labels[c.PRIORITY_CLASS_LABEL] == expected
        # Gated pods are never bound, whatever the scheduler and kwok nodes do.
        assert not pod["spec"].get("nodeName")
        assert pod["status"]["phase"] == "Pending"


def test_raycluster_without_annotation_runs_untouched(server, new_namespace, kubectl) -> None:  # noqa: F811
    ns = new_namespace("e2e")
    plain = raycluster("plain", 1, {})
    # No queue either: with one, Kueue as shipped admits the cluster whole, which
    # tests/e2e/test_kueue_shipped.py covers; here nobody holds it back.
    del plain["metadata"]["labels"][c.QUEUE_LABEL]
    kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(plain), check=True)

    def running() -> list[dict[str, Any]] | None:
        pods = pods_of(kubectl, ns, "plain")
        ok = len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods)
        return pods if ok else None

    pods = wait_for(running, timeout=90, message="ungated Ray pods to run on kwok nodes")
    for pod in pods:
        assert gates(pod) == []
        assert c.PRIORITY_CLASS_LABEL not in pod["metadata"]["labels"]
