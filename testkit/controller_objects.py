"""Objects shaped as the API server stores them, for the controller's tests.

Pods start from the captured KubeRay AdmissionReviews (defaulted spec,
managedFields, the RayCluster owner reference) and get what the API server and
raykueue's webhook add: name, uid, our labels and gate, a Pending status.
Workloads are built by `controller.workload.build_workload` and given the
metadata the API server adds and the status Kueue writes (messages copied from
Kueue v0.19's scheduler).
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

from raykueue.controller import workload as w
from raykueue.core import contract as c
from testkit.reviews import head_review, pod_of, worker_review

T0 = "2026-12-02T09:40:12Z"
T1 = "2026-12-02T09:40:15Z"
T2 = "2026-12-02T09:41:02Z"
CQ = "team-a-cq"
FLAVOR = "gpu-a100"

_uids = itertools.count(1)
_rvs = itertools.count(1000)


def next_uid() -> str:
    return f"0a1b2c3d-0000-4000-8000-{next(_uids):012d}"


def next_rv() -> str:
    return str(next(_rvs))


def pod(role: str = c.ROLE_WORKER, *, name: str | None = None, uid: str | None = None,
        cluster: str = "raycluster-gpu", queue: str | None = "team-a",
        priority: str | None = None, gated: bool = True, phase: str = "Pending",
        ready: bool = False, deleting: bool = False, node_selector: dict[str, str] | None = None,
        namespace: str = "team-a") -> dict[str, Any]:
    obj = copy.deepcopy(pod_of(head_review() if role == c.ROLE_HEAD else worker_review()))
    meta = obj["metadata"]
    generate = meta.pop("generateName", f"{cluster}-{role}-")
    meta["name"] = name or f"{generate}{next(_uids):05d}"
    meta["namespace"] = namespace
    meta["uid"] = uid or next_uid()
    meta["resourceVersion"] = next_rv()
    meta["creationTimestamp"] = T0
    labels = meta.setdefault("labels", {})
    labels[c.CLUSTER_LABEL] = cluster
    labels[c.NODE_TYPE_LABEL] = role
    labels[c.MANAGED_BY_LABEL] = c.MANAGED_BY_VALUE
    if queue is not None:
        labels[c.QUEUE_LABEL] = queue
    labels[c.PRIORITY_CLASS_LABEL] = priority or (
        c.DEFAULT_HEAD_PRIORITY_CLASS if role == c.ROLE_HEAD else c.DEFAULT_WORKER_PRIORITY_CLASS)
    spec = obj["spec"]
    if gated:
        spec["schedulingGates"] = [{"name": c.GATE}]
    else:
        spec.pop("schedulingGates", None)
        spec["nodeName"] = "kwok-node-1"
    if node_selector is not None:
        spec["nodeSelector"] = dict(node_selector)
    if deleting:
        meta["deletionTimestamp"] = T2
        meta["deletionGracePeriodSeconds"] = 30
    conditions: list[dict[str, Any]] = []
    if gated:
        conditions.append({"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                           "message": "Scheduling is blocked due to non-empty scheduling gates",
                           "lastProbeTime": None, "lastTransitionTime": T0})
    else:
        conditions += [
            {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
             "lastTransitionTime": T1},
            {"type": "Ready", "status": "True" if ready else "False", "lastProbeTime": None,
             "lastTransitionTime": T1},
        ]
    obj["status"] = {"phase": phase, "conditions": conditions, "qosClass": "Burstable"}
    return obj


def workload(for_pod: dict[str, Any], state: str = "pending", *, version: str = w.V1BETA2,
             flavor: str = FLAVOR, priority: int = 100, ours: bool = True,
             pods_ready: str | None = None, extra_conditions: list[dict[str, Any]] | None = None
             ) -> dict[str, Any]:
    """A Workload as stored, in one of: new, pending, reserved, admitted,
    evicted, finished."""
    labels = for_pod["metadata"]["labels"]
    wl = w.build_workload(for_pod, w.Priority(labels[c.PRIORITY_CLASS_LABEL], priority), version)
    meta = wl["metadata"]
    meta["uid"] = next_uid()
    meta["resourceVersion"] = next_rv()
    meta["generation"] = 1
    meta["creationTimestamp"] = T0
    meta["finalizers"] = ["kueue.x-k8s.io/resource-in-use"]
    meta["managedFields"] = [{"manager": "raykueue", "operation": "Update",
                              "apiVersion": w.api_version(version), "time": T0,
                              "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]
    if not ours:
        # As Kueue's pod integration names and labels them.
        meta["name"] = f"pod-{for_pod['metadata']['name']}-1a2b3"
        meta["labels"] = {"kueue.x-k8s.io/job-uid": for_pod["metadata"]["uid"]}
    wl["spec"]["active"] = True
    conditions: list[dict[str, Any]] = []
    status: dict[str, Any] = {}
    if state == "pending":
        conditions.append(_cond(
            w.QUOTA_RESERVED, "False", "Pending",
            f"couldn't assign flavors to pod set main: insufficient unused quota for "
            f"nvidia.com/gpu in flavor {flavor}, 1 more needed"))
        status["resourceRequests"] = [{"name": "main", "resources": {
            "cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"}}]
    if state in ("reserved", "admitted", "evicted", "finished"):
        status["admission"] = {"clusterQueue": CQ, "podSetAssignments": [{
            "name": "main", "count": 1,
            "flavors": {"cpu": flavor, "memory": flavor, "nvidia.com/gpu": flavor},
            "resourceUsage": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"},
        }]}
        conditions.append(_cond(w.QUOTA_RESERVED, "True", "QuotaReserved",
                                f"Quota reserved in ClusterQueue {CQ}"))
    if state in ("admitted", "evicted", "finished"):
        conditions.append(_cond(w.ADMITTED, "True", "Admitted", "The workload is admitted"))
    if state == "reserved":
        conditions.append(_cond(w.ADMITTED, "False", "UnsatisfiedAdmissionChecks",
                                "The workload has not all admission checks"))
    if state == "evicted":
        conditions += [
            _cond(w.EVICTED, "True", "Preempted",
                  "Preempted to accommodate a workload (UID: 7d1e0b7e-aaaa-4bbb-8ccc-000000000042,"
                  " JobUID: UNKNOWN) due to prioritization in the ClusterQueue"),
            _cond(w.PREEMPTED, "True", "InClusterQueue",
                  "Preempted to accommodate a workload (UID: 7d1e0b7e-aaaa-4bbb-8ccc-000000000042,"
                  " JobUID: UNKNOWN) due to prioritization in the ClusterQueue"),
        ]
    if state == "finished":
        conditions.append(_cond(w.FINISHED, "True", "PodDeleted", "pod deleted"))
    if pods_ready is not None:
        reason = w.READY_STARTED if pods_ready == "True" else w.READY_WAIT_FOR_RECOVERY
        conditions.append(_cond(w.PODS_READY, pods_ready, reason, "x"))
    conditions += extra_conditions or []
    if conditions:
        status["conditions"] = conditions
    if status:
        wl["status"] = status
    return wl


def _cond(type_: str, status: str, reason: str, message: str) -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": T1, "observedGeneration": 1}


def flavor(name: str = FLAVOR, node_labels: dict[str, str] | None = None,
           tolerations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if node_labels is not None:
        spec["nodeLabels"] = node_labels
    if tolerations is not None:
        spec["tolerations"] = tolerations
    return {"apiVersion": w.api_version(w.V1BETA2), "kind": "ResourceFlavor",
            "metadata": {"name": name, "uid": next_uid(), "resourceVersion": next_rv(),
                         "generation": 1, "creationTimestamp": T0,
                         "finalizers": ["kueue.x-k8s.io/resource-in-use"]},
            "spec": spec}


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {"apiVersion": w.api_version(w.V1BETA2), "kind": "WorkloadPriorityClass",
            "metadata": {"name": name, "uid": next_uid(), "resourceVersion": next_rv(),
                         "generation": 1, "creationTimestamp": T0},
            "value": value, "description": f"{name} priority"}


GPU_TAINT_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
