"""What tests and benches write on a real API server in place of KubeRay, Kueue and
the kubelet: a KubeRay pod as raykueue's webhook stores it, Kueue's admission and
eviction (server-side applies of the Workload's status under Kueue's field
manager, as Kueue's own integration tests do), a pod's readiness.
"""

from __future__ import annotations

import time
from typing import Any

from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.kube.resources import PODS, crd
from raykueue.kube.rest import ApiError, Rest
from testkit import reviews as rv
from testkit.reads import get_or_none
from testkit.waiting import wait_for

WORKLOADS = crd(c.KUEUE_GROUP, "v1beta2", "workloads")
FLAVORS = crd(c.KUEUE_GROUP, "v1beta2", "resourceflavors", namespaced=False)
WPCS = crd(c.KUEUE_GROUP, "v1beta2", "workloadpriorityclasses", namespaced=False)
KUEUE_MANAGER = "kueue-admission"  # the field manager Kueue admits with
HOLD = "test.raykueue.io/hold"  # a pod finalizer so a test can look at a deleted pod
LOCAL_QUEUE = "ctl-lq"


def ray_pod(ns: str, scope: dict[str, str], role: str, name: str, *,
            cluster: str = "rc", node_selector: dict[str, str] | None = None,
            hold: bool = False) -> dict[str, Any]:
    """A KubeRay pod (from the captured review) as raykueue's webhook stores it.

    Opted in on the pod itself, so that where Kueue as shipped takes it on the way
    in (the e2e stack), raykueue's webhook takes it back (tests/e2e register it).
    """
    pod = rv.creatable_pod(role)
    meta = pod["metadata"]
    meta.pop("generateName", None)
    meta.update(name=name, namespace=ns)
    meta.setdefault("annotations", {})[c.STANDALONE_ANNOTATION] = "true"
    meta["labels"].update({
        c.CLUSTER_LABEL: cluster, c.NODE_TYPE_LABEL: role, c.QUEUE_LABEL: LOCAL_QUEUE,
        c.PRIORITY_CLASS_LABEL: scope[role], c.MANAGED_BY_LABEL: c.MANAGED_BY_VALUE})
    if hold:
        meta["finalizers"] = [HOLD]
    spec = pod["spec"]
    spec["schedulingGates"] = [{"name": c.GATE}]
    if node_selector:
        spec["nodeSelector"] = node_selector
    return pod


def create_pod(admin: Rest, pod: dict[str, Any]) -> dict[str, Any]:
    return admin.create(PODS.path(pod["metadata"]["namespace"]), pod)


def workload_of(admin: Rest, pod: dict[str, Any]) -> dict[str, Any] | None:
    return get_or_none(admin, WORKLOADS.path(pod["metadata"]["namespace"], w.workload_name(pod)))


def workloads_in(admin: Rest, ns: str) -> list[dict[str, Any]]:
    return admin.get(WORKLOADS.path(ns))["items"]


def live(admin: Rest, pod: dict[str, Any]) -> dict[str, Any] | None:
    return get_or_none(admin, PODS.path(pod["metadata"]["namespace"], pod["metadata"]["name"]))


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def kueue_status(admin: Rest, wl: dict[str, Any], scope: dict[str, str],
                 *extra: dict[str, Any]) -> dict[str, Any]:
    """What Kueue writes on admission (one status apply), plus `extra` conditions."""
    meta = wl["metadata"]
    body = {
        "apiVersion": WORKLOADS.api_version, "kind": "Workload",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "status": {
            "admission": {"clusterQueue": scope["cq"], "podSetAssignments": [{
                "name": "main", "count": 1,
                "flavors": {"cpu": scope["flavor"], "memory": scope["flavor"]},
                "resourceUsage": {"cpu": "1", "memory": "1Gi"}}]},
            "conditions": [
                {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                 "message": f"Quota reserved in ClusterQueue {scope['cq']}",
                 "lastTransitionTime": now(), "observedGeneration": meta.get("generation", 1)},
                {"type": "Admitted", "status": "True", "reason": "Admitted",
                 "message": "The workload is admitted", "lastTransitionTime": now(),
                 "observedGeneration": meta.get("generation", 1)},
                *extra,
            ]},
    }
    return admin.apply(WORKLOADS.path(meta["namespace"], meta["name"], "status"), body,
                       KUEUE_MANAGER, force=True)


def admit(admin: Rest, pod: dict[str, Any], scope: dict[str, str]) -> dict[str, Any]:
    wl = wait_for(lambda: workload_of(admin, pod), timeout=30,
                  message=f"Workload of {pod['metadata']['name']}")
    return kueue_status(admin, wl, scope)


def evict(admin: Rest, pod: dict[str, Any], scope: dict[str, str]) -> dict[str, Any]:
    wl = workload_of(admin, pod)
    assert wl is not None
    message = ("Preempted to accommodate a workload (UID: 11111111-2222-4333-8444-555555555555, "
               "JobUID: UNKNOWN) due to prioritization in the ClusterQueue")
    return kueue_status(admin, wl, scope, {
        "type": "Evicted", "status": "True", "reason": "Preempted", "message": message,
        "lastTransitionTime": now()}, {
        "type": "Preempted", "status": "True", "reason": "InClusterQueue", "message": message,
        "lastTransitionTime": now()})


def make_ready(admin: Rest, pod: dict[str, Any]) -> None:
    """What the kubelet reports once the container runs (no node runs it here)."""
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    admin.apply(PODS.path(ns, name, "status"), {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
        "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": now()}]}},
        "test-kubelet", force=True)


def release(admin: Rest, pod: dict[str, Any]) -> None:
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    try:
        admin.json_patch(PODS.path(ns, name), [{"op": "remove", "path": "/metadata/finalizers"}])
    except ApiError as exc:
        if not exc.is_not_found:
            raise


def cond(wl: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    return w.condition(wl, type_) if wl is not None else None  # type: ignore[return-value]


def events_for(admin: Rest, ns: str, name: str) -> list[dict[str, Any]]:
    items = admin.get(f"/apis/events.k8s.io/v1/namespaces/{ns}/events")["items"]
    return [e for e in items if e.get("regarding", {}).get("name") == name]
