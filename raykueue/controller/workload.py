"""Building a Workload from a pod, and reading a Workload's state.

Pure functions over parsed JSON. Both Workload versions Kueue serves are
handled here and nowhere else: v1beta2 (`spec.priorityClassRef`) and v1beta1
(`spec.priorityClassName` + `priorityClassSource`); their status shapes agree
on everything we read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from raykueue.controller import pods as p
from raykueue.core import contract as c
from raykueue.core import submitter
from raykueue.core.objects import Obj, annotations, labels, metadata, spec

V1BETA2: Final = "v1beta2"
V1BETA1: Final = "v1beta1"
VERSIONS: Final = (V1BETA2, V1BETA1)  # preferred first
KIND: Final = "Workload"
POD_SET: Final = "main"  # Kueue's default podSet name, as its pod integration uses
# v1beta1 names the kind of priority class in a string instead of a reference.
V1BETA1_WPC_SOURCE: Final = "kueue.x-k8s.io/workloadpriorityclass"

# Condition types Kueue writes on a Workload (apis/kueue/v1beta2/workload_types.go).
QUOTA_RESERVED: Final = "QuotaReserved"
ADMITTED: Final = "Admitted"
EVICTED: Final = "Evicted"
PREEMPTED: Final = "Preempted"
REQUEUED: Final = "Requeued"
FINISHED: Final = "Finished"
PODS_READY: Final = "PodsReady"
# The ones the owner of a Workload writes; everything else belongs to Kueue.
OWNED_CONDITIONS: Final = (PODS_READY, FINISHED)

# Reasons of PodsReady, as Kueue's job framework writes them.
READY_STARTED: Final = "Started"
READY_RECOVERED: Final = "Recovered"
READY_WAIT_FOR_RECOVERY: Final = "WaitForRecovery"
READY_MESSAGE: Final = "All pods reached readiness and the workload is running"
RECOVERY_MESSAGE: Final = "At least one pod has failed, waiting for recovery"

_HASH_LEN: Final = 8
_MAX_NAME: Final = 253


def api_version(version: str) -> str:
    return f"{c.KUEUE_GROUP}/{version}"


# --- naming -------------------------------------------------------------------

def short_hash(uid: str) -> str:
    return hashlib.sha256(uid.encode()).hexdigest()[:_HASH_LEN]


def workload_name(pod: Obj) -> str:
    """`<pod name>-<hash of uid>`: deterministic, so a restarted controller that
    missed its own create finds the Workload by name instead of making a second.

    The uid hash keeps a recreated pod with the same name (a KubeRay head) from
    inheriting its predecessor's Workload. The name part is cut so the result
    stays a DNS-1123 subdomain of at most 253 characters.
    """
    meta = metadata(pod)
    name = str(meta.get("name") or "")
    uid = str(meta.get("uid") or "")
    room = _MAX_NAME - _HASH_LEN - 1
    base = name[:room].rstrip("-.")
    return f"{base}-{short_hash(uid)}" if base else short_hash(uid)


# --- building -----------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Priority:
    """A WorkloadPriorityClass and its value, read from the cache.

    Kueue does not fill `spec.priority` from the reference on Workloads it did
    not create, and its scheduler reads only `spec.priority`, so both travel
    together (the CRD's CEL rule also requires it).
    """

    name: str
    value: int


def pod_set_template(pod: Obj) -> dict[str, Any]:
    """The pod's spec as Kueue should see it.

    Kueue's own pod integration keeps the whole spec (constructPodSet). We drop
    only what would mislead it or what its Workload webhook rejects: our gate
    (the Workload must describe the pod as it will run), `nodeName` (never set
    on a gated pod, but it would pin the podSet), and the reserved `pods`
    resource key. Unknown fields are pruned by the CRD's structural schema.
    """
    template_spec = p.full_spec(pod)
    gates = [g for g in template_spec.get("schedulingGates") or []
             if not (isinstance(g, dict) and g.get("name") == c.GATE)]
    if gates:
        template_spec["schedulingGates"] = gates
    else:
        template_spec.pop("schedulingGates", None)
    template_spec.pop("nodeName", None)
    for key in ("containers", "initContainers"):
        for container in template_spec.get(key) or []:
            resources = container.get("resources") if isinstance(container, dict) else None
            if isinstance(resources, dict):
                for kind in ("requests", "limits"):
                    if isinstance(resources.get(kind), dict):
                        resources[kind].pop("pods", None)
    pod_resources = template_spec.get("resources")
    if isinstance(pod_resources, dict):
        for kind in ("requests", "limits"):
            if isinstance(pod_resources.get(kind), dict):
                pod_resources[kind].pop("pods", None)
    return {"spec": template_spec}


def workload_labels(pod: Obj) -> dict[str, str]:
    """Ray's labels (so `kubectl get workloads -l ray.io/cluster=X` works), the
    pod uid (adoption after a restart) and our managed-by mark (what tells our
    Workloads from Kueue's own)."""
    pod_labels = labels(pod)
    out = {key: pod_labels[key] for key in (c.CLUSTER_LABEL, c.GROUP_LABEL, c.NODE_TYPE_LABEL)
           if isinstance(pod_labels.get(key), str)}
    out[c.POD_UID_LABEL] = str(metadata(pod).get("uid") or "")
    out[c.MANAGED_BY_LABEL] = c.MANAGED_BY_VALUE
    return out


def owner_reference(pod: Obj) -> dict[str, Any]:
    meta = metadata(pod)
    # Not a controller reference: Kueue's pod reconciler follows only those, and
    # finalizes (OwnerNotFound) the Workloads of a pod it cannot find in its
    # cache, which for our pods it never holds. blockOwnerDeletion keeps the
    # garbage collector deleting the Workload with its pod.
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "controller": False,
        "blockOwnerDeletion": True,
    }


def submitter_spec(pod: Obj) -> dict[str, Any] | None:
    """The submitter pod whose quota this pod's Workload reserves, or None.

    Only a head carries one: the head of a RayJob in K8sJobMode, whose RayCluster
    webhook copied the RayJob's `raykueue.io/submitter` onto the head template
    (core/submitter.py). Reserving it with the head means the submitter, which
    KubeRay creates only once the cluster is Ready, never waits for quota the
    cluster's admission already had, and never runs on quota nobody holds.
    """
    if labels(pod).get(c.NODE_TYPE_LABEL) != c.ROLE_HEAD:
        return None
    return submitter.decode(annotations(pod).get(c.SUBMITTER_ANNOTATION))


def pod_queue(pod: Obj) -> str | None:
    """The pod's LocalQueue: the label the webhook writes at creation, else the
    annotation raykueue writes on a running pod it adopts (controller/adopt.py),
    where Kueue's pod webhook refuses the label."""
    return labels(pod).get(c.QUEUE_LABEL) or annotations(pod).get(c.QUEUE_ANNOTATION) or None


def pod_priority_class(pod: Obj) -> str | None:
    """The pod's WorkloadPriorityClass, label first, as `pod_queue` reads the queue."""
    return (labels(pod).get(c.PRIORITY_CLASS_LABEL)
            or annotations(pod).get(c.PRIORITY_CLASS_ANNOTATION) or None)


def build_workload(pod: Obj, priority: Priority | None, version: str = V1BETA2) -> dict[str, Any]:
    if version not in VERSIONS:
        raise ValueError(f"unsupported Workload version {version!r}")
    meta = metadata(pod)
    workload_spec: dict[str, Any] = {
        "podSets": [{"name": POD_SET, "count": 1, "template": pod_set_template(pod)}],
    }
    reserved = submitter_spec(pod)
    if reserved is not None:
        # A podSet of its own (as Kueue's RayJob integration gives it): Kueue
        # admits the Workload's podSets together, at the Workload's priority.
        workload_spec["podSets"].append(submitter.pod_set(reserved))
    queue = pod_queue(pod)
    if queue:
        workload_spec["queueName"] = queue
    if priority is not None:
        if version == V1BETA2:
            workload_spec["priorityClassRef"] = {
                "group": c.KUEUE_GROUP,
                "kind": c.WORKLOAD_PRIORITY_CLASS_KIND,
                "name": priority.name,
            }
        else:
            workload_spec["priorityClassName"] = priority.name
            workload_spec["priorityClassSource"] = V1BETA1_WPC_SOURCE
        workload_spec["priority"] = priority.value
    return {
        "apiVersion": api_version(version),
        "kind": KIND,
        "metadata": {
            "name": workload_name(pod),
            "namespace": meta.get("namespace"),
            "labels": workload_labels(pod),
            "ownerReferences": [owner_reference(pod)],
        },
        "spec": workload_spec,
    }


# --- reading ------------------------------------------------------------------

def conditions(wl: Obj) -> list[Mapping[str, Any]]:
    status = wl.get("status")
    items = status.get("conditions") if isinstance(status, dict) else None
    return [x for x in items if isinstance(x, dict)] if isinstance(items, list) else []


def condition(wl: Obj, type_: str) -> Mapping[str, Any] | None:
    for cond in conditions(wl):
        if cond.get("type") == type_:
            return cond
    return None


def is_true(wl: Obj, type_: str) -> bool:
    cond = condition(wl, type_)
    return cond is not None and cond.get("status") == "True"


def is_admitted(wl: Obj) -> bool:
    """Admitted, not merely QuotaReserved: admission checks may still be pending."""
    return is_true(wl, ADMITTED)


def is_quota_reserved(wl: Obj) -> bool:
    return is_true(wl, QUOTA_RESERVED)


def is_evicted(wl: Obj) -> bool:
    return is_true(wl, EVICTED)


def is_finished(wl: Obj) -> bool:
    return is_true(wl, FINISHED)


def pods_ready(wl: Obj) -> bool | None:
    """True/False from the PodsReady condition; None when it is absent, which
    Kueue's WaitForPodsReady treats like False/WaitForStart."""
    cond = condition(wl, PODS_READY)
    if cond is None:
        return None
    return cond.get("status") == "True"


def is_ours(wl: Obj) -> bool:
    return labels(wl).get(c.MANAGED_BY_LABEL) == c.MANAGED_BY_VALUE


def owner_pod(wl: Obj) -> tuple[str, str] | None:
    """(name, uid) of the pod this Workload stands for: its owner reference to a pod.

    Workloads made before raykueue stopped marking that reference as controller
    carry `controller: true`; both are read alike.
    """
    refs = metadata(wl).get("ownerReferences")
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if isinstance(ref, dict) and ref.get("kind") == "Pod" and ref.get("apiVersion") == "v1":
            return str(ref.get("name") or ""), str(ref.get("uid") or "")
    return None


def pod_uid_of(wl: Obj) -> str | None:
    """The uid of the pod a Workload stands for: owner first, then our label."""
    owner = owner_pod(wl)
    if owner is not None and owner[1]:
        return owner[1]
    value = labels(wl).get(c.POD_UID_LABEL)
    return value or None


def priority_class_name(wl: Obj) -> str | None:
    wl_spec = spec(wl)
    ref = wl_spec.get("priorityClassRef")
    if isinstance(ref, dict) and isinstance(ref.get("name"), str):
        return ref["name"]
    name = wl_spec.get("priorityClassName")
    return name if isinstance(name, str) and name else None


def priority_value(wl: Obj) -> int:
    value = spec(wl).get("priority")
    return value if isinstance(value, int) else 0


def queue_name(wl: Obj) -> str | None:
    value = spec(wl).get("queueName")
    return value if isinstance(value, str) and value else None
