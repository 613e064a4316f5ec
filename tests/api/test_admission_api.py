"""The admission webhooks as the real kube-apiserver calls them.

Each test creates pods through the API server (kubectl or the REST API) and
reads back what was stored: that is the only proof that a patch is accepted,
that a denial reaches the user, and that the gate holds.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from raykueue.core import contract as c
from testkit.api.admission import create, opted_in_pod, ray_pod, start_server
from testkit.reviews import gates
from testkit.servers import RaykueueServer
from testkit.stackfixtures import new_namespace  # noqa: F401 - fixture
from testkit.waiting import wait_for

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"


@pytest.fixture(scope="module")
def server(api_stack, tmp_path_factory) -> Iterator[RaykueueServer]:
    server = start_server(api_stack, tmp_path_factory)
    yield server
    server.close()


@pytest.fixture
def ns(new_namespace, server, kubectl) -> str:  # noqa: F811
    name = new_namespace("adm")
    if not server.running:
        server.start()
    return name


def test_opted_in_pod_is_stored_gated_with_queue_and_priority(ns: str, kubectl) -> None:
    result = create(kubectl, opted_in_pod(ns, "head"))
    assert result.returncode == 0, result.stderr
    pod = json.loads(result.stdout)
    assert gates(pod) == [c.GATE]
    labels = pod["metadata"]["labels"]
    assert labels[c.QUEUE_LABEL] == "team-a"
    # No RayCluster owns it: head priority is for real heads only (tests/api/test_priority_api.py).
    assert labels[c.PRIORITY_CLASS_LABEL] == "ray-worker"
    assert labels[c.MANAGED_BY_LABEL] == c.MANAGED_BY_VALUE
    assert pod["metadata"]["name"].startswith("rc-head-")


def test_pod_without_annotation_is_stored_untouched(ns: str, kubectl) -> None:
    pod = ray_pod(ns, labels={c.QUEUE_LABEL: "team-a"})
    stored = json.loads(create(kubectl, pod).stdout)
    assert gates(stored) == []
    assert c.PRIORITY_CLASS_LABEL not in stored["metadata"]["labels"]


def test_invalid_opt_in_is_denied_with_the_message(ns: str, kubectl) -> None:
    pod = ray_pod(ns, labels={c.QUEUE_LABEL: "team-a"},
                  annotations={c.STANDALONE_ANNOTATION: "yes"})
    result = create(kubectl, pod)
    assert result.returncode != 0
    assert "denied the request" in result.stderr
    assert c.STANDALONE_ANNOTATION in result.stderr and '"true"' in result.stderr


def test_missing_queue_is_denied_saying_which_annotation_to_set(ns: str, kubectl) -> None:
    pod = ray_pod(ns, annotations={c.STANDALONE_ANNOTATION: "true"})
    result = create(kubectl, pod)
    assert result.returncode != 0
    assert c.QUEUE_ANNOTATION in result.stderr


def test_dry_run_gets_the_same_answer_and_stores_nothing(ns: str, kubectl) -> None:
    pod = opted_in_pod(ns)
    pod["metadata"].pop("generateName")
    pod["metadata"]["name"] = "dry"
    result = create(kubectl, pod, "--dry-run=server")
    assert result.returncode == 0, result.stderr
    assert gates(json.loads(result.stdout)) == [c.GATE]
    assert kubectl("get", "pod", "dry", "-n", ns).returncode != 0


def test_queue_and_opt_in_come_from_the_raycluster_cache(ns: str, kubectl, api_stack) -> None:
    cluster = api_stack.api.call("POST", f"/apis/ray.io/v1/namespaces/{ns}/rayclusters", {
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "raycluster-gpu", "labels": {c.QUEUE_LABEL: "from-cluster"},
                     "annotations": {c.STANDALONE_ANNOTATION: "true"}},
        "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [
            {"name": "ray-head", "image": "rayproject/ray:2.46.0"}]}}}},
    })
    owner = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "raycluster-gpu",
             "uid": cluster["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}

    def stored() -> dict[str, Any] | None:
        # Stamped, as KubeRay makes it from the template raykueue's first webhook stamped.
        result = create(kubectl, ray_pod(ns, owner=owner, labels={c.OPTED_IN_LABEL: c.OPTED_IN_VALUE}),
                        "--dry-run=server")
        return json.loads(result.stdout) if result.returncode == 0 else None

    # The RayCluster reaches raykueue's cache through a watch; until then the
    # pod is denied (KubeRay would retry), so wait for the cache, not a time.
    pod = wait_for(stored, timeout=20, message="pod owned by an opted-in RayCluster")
    assert gates(pod) == [c.GATE]
    assert pod["metadata"]["labels"][c.QUEUE_LABEL] == "from-cluster"


def test_namespace_default_local_queue_is_used(ns: str, kubectl, api_stack) -> None:
    api_stack.api.call("POST", f"{KUEUE}/namespaces/{ns}/localqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
        "metadata": {"name": "default"}, "spec": {"clusterQueue": "team-a"},
    })
    pod = ray_pod(ns, annotations={c.STANDALONE_ANNOTATION: "true"})

    def stored() -> dict[str, Any] | None:
        result = create(kubectl, pod, "--dry-run=server")
        return json.loads(result.stdout) if result.returncode == 0 else None

    assert wait_for(stored, timeout=20)["metadata"]["labels"][c.QUEUE_LABEL] == "default"


def test_gate_removal_by_a_user_is_denied_and_queue_label_is_frozen(ns: str, kubectl) -> None:
    pod = json.loads(create(kubectl, opted_in_pod(ns)).stdout)
    name = pod["metadata"]["name"]
    result = kubectl("patch", "pod", name, "-n", ns, "--type=json",
                     "-p", json.dumps([{"op": "remove", "path": "/spec/schedulingGates/0"}]))
    assert result.returncode != 0
    assert "lifted by raykueue when Kueue admits" in result.stderr
    result = kubectl("label", "pod", name, "-n", ns, "--overwrite", f"{c.QUEUE_LABEL}=other")
    assert result.returncode != 0
    assert "may not change while the pod waits" in result.stderr
    # Other labels stay editable.
    assert kubectl("label", "pod", name, "-n", ns, "team=ml").returncode == 0
    stored = json.loads(kubectl("get", "pod", name, "-n", ns, "-o", "json").stdout)
    assert gates(stored) == [c.GATE]


def test_api_server_really_calls_raykueue(ns: str, kubectl, server) -> None:
    server.stop()
    result = create(kubectl, opted_in_pod(ns))
    assert result.returncode != 0
    assert "failed calling webhook" in result.stderr
    plain = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "plain", "namespace": ns},
             "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    assert create(kubectl, plain).returncode == 0


def test_health_endpoints_answer_curl_over_tls(ns: str, server) -> None:
    for path in ("/healthz", "/readyz"):
        result = subprocess.run(
            ["curl", "-sS", "--fail", "--cacert", str(server.ca_file), server.url + path],
            capture_output=True, text=True, timeout=30,
        )
        assert result.returncode == 0, result.stderr
        body = json.loads(result.stdout)
    assert body["ready"] is True
    assert body["checks"]["caches"]["ok"] is True
    assert body["checks"]["certificates"]["ok"] is True


def test_pod_priority_option_is_accepted_by_the_api_server(ns: str, kubectl, server) -> None:
    before = dict(server.extra_env)
    server.restart({**before, "RAYKUEUE_SET_POD_PRIORITY": "true",
                    "RAYKUEUE_HEAD_POD_PRIORITY_CLASS": "rk-test-head",
                    "RAYKUEUE_WORKER_POD_PRIORITY_CLASS": "rk-test-worker"})
    for name, value in (("rk-test-head", 2000), ("rk-test-worker", 200)):
        kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value}), check=True)

    def stored() -> dict[str, Any] | None:
        # A bare opted-in pod: the worker's class, head or not (no RayCluster owns it).
        result = create(kubectl, opted_in_pod(ns, "head"))
        if result.returncode != 0:
            raise AssertionError(result.stderr)
        pod = json.loads(result.stdout)
        # Until the PriorityClass cache has the class, the pod is gated without it.
        return pod if pod["spec"].get("priorityClassName") == "rk-test-worker" else None

    try:
        pod = wait_for(stored, timeout=20, message="pod with PriorityClass rk-test-worker")
    finally:
        server.restart(before)
    assert pod["spec"]["priority"] == 200
    assert gates(pod) == [c.GATE]


def test_unique_names_for_generate_name_pods(ns: str, kubectl) -> None:
    names = {json.loads(create(kubectl, opted_in_pod(ns)).stdout)["metadata"]["name"]
             for _ in range(3)}
    assert len(names) == 3
    assert all(n.startswith("rc-worker-") for n in names)


def _owner(obj: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


@pytest.mark.parametrize("kind", ["RayJob", "RayService"])
def test_pods_of_rayjob_and_rayservice_clusters_resolve_through_the_owner_chain(
    kind: str, ns: str, kubectl, api_stack
) -> None:
    """The RayJob/RayService carries opt-in and queue; its RayCluster carries neither.

    KubeRay copies its owner's labels and annotations to the RayCluster it
    creates, but a RayCluster edited since has only the owner to go by: its
    stamped pod's queue is read along the owner chain. The operator is not needed
    for this: the objects are created as KubeRay would, with owner references.
    """
    api = api_stack.api
    head = {"rayStartParams": {}, "template": {"spec": {"containers": [
        {"name": "ray-head", "image": "rayproject/ray:2.46.0"}]}}}
    if kind == "RayJob":
        spec = {"rayClusterSpec": {"headGroupSpec": head}, "entrypoint": "python train.py",
                "suspend": True, "submissionMode": "HTTPMode"}
    else:
        spec = {"rayClusterConfig": {"headGroupSpec": head}}
    plural = {"RayJob": "rayjobs", "RayService": "rayservices"}[kind]
    owner = api.call("POST", f"/apis/ray.io/v1/namespaces/{ns}/{plural}", {
        "apiVersion": "ray.io/v1", "kind": kind,
        "metadata": {"name": "train", "labels": {c.QUEUE_LABEL: "from-owner"},
                     "annotations": {c.STANDALONE_ANNOTATION: "true"}},
        "spec": spec,
    })
    cluster = api.call("POST", f"/apis/ray.io/v1/namespaces/{ns}/rayclusters", {
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "train-raycluster", "ownerReferences": [_owner(owner)]},
        "spec": {"headGroupSpec": head},
    })

    def stored() -> dict[str, Any] | None:
        result = create(kubectl, ray_pod(ns, owner=_owner(cluster),
                                         labels={c.OPTED_IN_LABEL: c.OPTED_IN_VALUE}),
                        "--dry-run=server")
        return json.loads(result.stdout) if result.returncode == 0 else None

    pod = wait_for(stored, timeout=20, message=f"pod of a {kind}'s RayCluster")
    assert gates(pod) == [c.GATE]
    assert pod["metadata"]["labels"][c.QUEUE_LABEL] == "from-owner"
