"""The stack runs Kueue as users install it (devstack/kueue/shipped.py).

Each test shows one piece of Kueue's shipped behaviour live on the stack: its
webhooks default a job's queue to the namespace's `default` LocalQueue and
suspend it, its ray.io/raycluster integration takes a RayCluster with a queue
label, and its visibility API answers through the API server's aggregation
layer. raykueue is not running here: this is the Kueue that raykueue must
live beside.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import devstack
from devstack.kueue.shipped import QUEUE_LABEL, shipped_module
from testkit.e2e.controller import raycluster
from testkit.stackfixtures import namespaces
from testkit.waiting import wait_for

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta2"
QUOTA_CPU = 4


@pytest.fixture
def queue_ns(shipped_stack: devstack.Stack) -> Iterator[str]:
    """A namespace whose LocalQueue `default` feeds its own ClusterQueue of QUOTA_CPU cpus."""
    api = shipped_stack.api
    flavor = shipped_stack.config.samples.flavor
    gen = namespaces(shipped_stack)
    make: Callable[..., str] = next(gen)
    ns = make("shipped")
    cq = f"cq-{uuid.uuid4().hex[:8]}"
    api.call("POST", f"{KUEUE}/clusterqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cq},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
                "name": flavor, "resources": [{"name": "cpu", "nominalQuota": str(QUOTA_CPU)},
                                              {"name": "memory", "nominalQuota": "64Gi"}]}]}],
        }})
    api.call("POST", f"{KUEUE}/namespaces/{ns}/localqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
        "metadata": {"name": "default", "namespace": ns}, "spec": {"clusterQueue": cq}})
    wait_for(lambda: _condition(api.get(f"{KUEUE}/namespaces/{ns}/localqueues/default"),
                                "Active") == "True",
             timeout=60, message=f"LocalQueue {ns}/default Active")
    try:
        yield ns
    finally:
        next(gen, None)  # deletes the namespace (and what is in it)
        api.delete(f"{KUEUE}/clusterqueues/{cq}")


def _condition(obj: dict, ctype: str) -> str | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c.get("status")
    return None


def _job(name: str, cpu: str) -> dict[str, Any]:
    """A plain batch Job with no queue label."""
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
            "name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}]}}},
    }


def _owned_workload(api, ns: str, kind: str, name: str) -> dict | None:
    for wl in api.get(f"{KUEUE}/namespaces/{ns}/workloads")["items"]:
        if any(o["kind"] == kind and o["name"] == name
               for o in wl["metadata"].get("ownerReferences") or []):
            return wl
    return None


def test_job_without_queue_label_gets_the_default_queue_and_kueue_admits_it(
        shipped_stack: devstack.Stack, queue_ns: str) -> None:
    api = shipped_stack.api
    created = api.call("POST", f"/apis/batch/v1/namespaces/{queue_ns}/jobs", _job("plain", "500m"))
    # Kueue's job webhook: queue defaulted to the LocalQueue `default`, job suspended
    assert created["metadata"]["labels"][QUEUE_LABEL] == "default"
    assert created["spec"]["suspend"] is True
    wl = wait_for(lambda: _owned_workload(api, queue_ns, "Job", "plain"), timeout=60,
                  message="Kueue's Workload for the Job")
    assert wl["spec"]["queueName"] == "default"
    wait_for(lambda: _condition(_owned_workload(api, queue_ns, "Job", "plain") or {},
                                "Admitted") == "True",
             timeout=60, message="Kueue to admit the Job's Workload")
    job = wait_for(lambda: (j := api.get(f"/apis/batch/v1/namespaces/{queue_ns}/jobs/plain"))
                   ["spec"]["suspend"] is False and j,
                   timeout=60, message="Kueue to unsuspend the admitted Job")
    assert job["metadata"]["labels"][QUEUE_LABEL] == "default"


def test_visibility_api_lists_a_pending_workload(shipped_stack: devstack.Stack,
                                                 queue_ns: str) -> None:
    module = shipped_module(shipped_stack.config.kueue_version)
    if not module.serves_visibility:
        pytest.skip(f"Kueue {shipped_stack.config.kueue_version} binds its visibility server to "
                    "0.0.0.0:8082 (no visibilityServer setting before v0.16): the stack runs it off")
    api = shipped_stack.api
    too_big = str(QUOTA_CPU * 2)
    api.call("POST", f"/apis/batch/v1/namespaces/{queue_ns}/jobs", _job("too-big", too_big))
    wl = wait_for(lambda: _owned_workload(api, queue_ns, "Job", "too-big"), timeout=60,
                  message="Kueue's Workload for the Job")
    path = f"{VISIBILITY}/namespaces/{queue_ns}/localqueues/default/pendingworkloads"

    def listed() -> dict | None:
        out = shipped_stack.kubectl("get", "--raw", path)
        assert out.returncode == 0, out.stderr
        items = json.loads(out.stdout)["items"]
        return items[0] if len(items) == 1 else None

    item = wait_for(listed, timeout=60, message=f"one pending Workload at {path}")
    assert item["metadata"]["name"] == wl["metadata"]["name"]
    assert item["localQueueName"] == "default"
    assert item["positionInLocalQueue"] == 0
    assert _condition(api.get(f"{KUEUE}/namespaces/{queue_ns}/workloads/"
                              f"{wl['metadata']['name']}"), "Admitted") != "True"


def test_raycluster_with_a_queue_label_is_suspended_by_kueue(shipped_stack: devstack.Stack,
                                                             queue_ns: str) -> None:
    api = shipped_stack.api
    rc = raycluster("rc", workers=1)
    rc["metadata"] = {"name": "rc", "labels": {QUEUE_LABEL: "default"}}
    created = api.call("POST", f"/apis/ray.io/v1/namespaces/{queue_ns}/rayclusters", rc)
    # Kueue's raycluster webhook suspends it at creation
    assert created["spec"]["suspend"] is True
    wl = wait_for(lambda: _owned_workload(api, queue_ns, "RayCluster", "rc"), timeout=60,
                  message="Kueue's Workload for the RayCluster")
    # one Workload for the whole cluster: a pod set per group
    assert sorted(ps["name"] for ps in wl["spec"]["podSets"]) == ["cpu", "head"]
