"""Ray objects as raykueue reads them: the one place for their shape and the opt-in.

A RayCluster, RayJob or RayService keeps its RayCluster spec (the pod templates)
and its suspend flag at paths that differ by kind; the opt-in is one annotation
on the object itself; Kueue admits an object whole when it carries Kueue's queue
label; a worker group's base count is minReplicas x numOfHosts, as KubeRay
makes pods; a Ray object's owner is its controller reference into ray.io.
The webhooks, the controller, the admission side's caches and the uninstall all
read these here, so none of them can drift from another.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from raykueue.core import contract as c
from raykueue.core.objects import METADATA_KEPT, Obj, annotations, controller_ref, labels, metadata, ref_group

# Where each kind keeps its RayCluster spec (pod templates) and its suspend flag.
CLUSTER_SPEC: Final[Mapping[str, tuple[str, ...]]] = {
    c.RAYCLUSTER_KIND: ("spec",),
    c.RAYJOB_KIND: ("spec", "rayClusterSpec"),
    c.RAYSERVICE_KIND: ("spec", "rayClusterConfig"),
}
# A RayService's `rayClusterConfig.suspend` suspends the cluster it makes next,
# not the service: KubeRay starts a new RayCluster when that spec changes.
SUSPEND: Final[Mapping[str, tuple[str, ...]]] = {
    c.RAYCLUSTER_KIND: ("spec", "suspend"),
    c.RAYJOB_KIND: ("spec", "suspend"),
    c.RAYSERVICE_KIND: ("spec", "rayClusterConfig", "suspend"),
}
RAY_OBJECT_KINDS: Final = tuple(CLUSTER_SPEC)
MANAGED_BY: Final = ("spec", "managedBy")
# What every cache of ours keeps of a worker group: a gang's base follows its
# minimum, and the autoscaler's victims are the pods it names to delete.
WORKER_GROUP_KEPT: Final = ("groupName", "minReplicas", "numOfHosts")


def get(obj: Obj | None, path: Sequence[str]) -> Any:
    """The value at `path` (list items by their index), None where it ends early."""
    node: Any = obj
    for part in path:
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, Mapping):
            node = node.get(part)
        else:
            return None
    return node


def as_dict(value: object) -> Obj:
    return value if isinstance(value, Mapping) else {}


# --- the opt-in -----------------------------------------------------------------------


def opt_in_value(obj: Obj | None) -> str | None:
    """The object's own opt-in annotation: the one place the opt-in is read from."""
    return annotations(obj).get(c.STANDALONE_ANNOTATION) if obj is not None else None


def is_opted_in(obj: Obj | None) -> bool:
    return opt_in_value(obj) == "true"


def template_opt_in(template: Obj) -> str | None:
    """The opt-in annotation on a pod template: refused since, read only to find it."""
    return as_dict(as_dict(template.get("metadata")).get("annotations")).get(c.STANDALONE_ANNOTATION)


def admitted_whole(obj: Obj | None) -> bool:
    """Kueue admits this object whole, as one Workload: it carries Kueue's queue label."""
    return obj is not None and bool(labels(obj).get(c.QUEUE_LABEL))


def handed_to_kueue(obj: Obj | None) -> bool:
    """raykueue handed this opted-in object to Kueue (webhooks/rayrules.kueue_takes)."""
    return obj is not None and c.HANDED_TO_KUEUE_ANNOTATION in annotations(obj)


def is_stamped(template: Obj) -> bool:
    return labels(template).get(c.OPTED_IN_LABEL) == c.OPTED_IN_VALUE


# --- the shape ------------------------------------------------------------------------


def kind_of(obj: Obj, kind: str | None = None) -> str:
    """`kind`, else the object's own (a list's items carry none)."""
    return kind or str(obj.get("kind") or "")


def is_suspended(obj: Obj | None, kind: str | None = None) -> bool:
    path = SUSPEND.get(kind_of(obj or {}, kind))
    return path is not None and get(obj, path) is True


def cluster_spec(obj: Obj, kind: str | None = None) -> Obj | None:
    path = CLUSTER_SPEC.get(kind_of(obj, kind))
    found = get(obj, path) if path is not None else None
    return found if isinstance(found, Mapping) else None


def templates(obj: Obj, kind: str | None = None) -> Iterator[tuple[tuple[str, ...], Obj]]:
    """(path, template) of every non-empty pod template of the object's RayCluster spec:
    the head's first, then each worker group's in order."""
    at = CLUSTER_SPEC.get(kind_of(obj, kind))
    cluster = get(obj, at) if at is not None else None
    if at is None or not isinstance(cluster, Mapping):
        return
    head = as_dict(as_dict(cluster.get("headGroupSpec")).get("template"))
    if head:
        yield (*at, "headGroupSpec", "template"), head
    groups = cluster.get("workerGroupSpecs")
    for i, group in enumerate(groups if isinstance(groups, list) else []):
        template = as_dict(as_dict(group).get("template"))
        if template:
            yield (*at, "workerGroupSpecs", str(i), "template"), template


def is_head_template(path: tuple[str, ...]) -> bool:
    return path[-2:] == ("headGroupSpec", "template")


def group_minimums(raycluster: Obj | None) -> dict[str, int]:
    """Each worker group's base count, minReplicas x numOfHosts, as KubeRay makes pods."""
    out: dict[str, int] = {}
    groups = as_dict(as_dict(raycluster).get("spec")).get("workerGroupSpecs")
    for group in groups if isinstance(groups, list) else []:
        if not isinstance(group, Mapping) or not isinstance(group.get("groupName"), str):
            continue
        count, hosts = group.get("minReplicas"), group.get("numOfHosts")
        count = count if isinstance(count, int) and count > 0 else 0
        out[group["groupName"]] = count * (hosts if isinstance(hosts, int) and hosts > 0 else 1)
    return out


def workers_to_delete(raycluster: Obj) -> frozenset[str]:
    """Pods the RayCluster tells KubeRay to delete next (the autoscaler's victims)."""
    out: set[str] = set()
    groups = as_dict(as_dict(raycluster).get("spec")).get("workerGroupSpecs")
    for group in groups if isinstance(groups, list) else []:
        names = as_dict(as_dict(group).get("scaleStrategy")).get("workersToDelete")
        out.update(str(x) for x in (names if isinstance(names, list) else []))
    return frozenset(out)


# --- the owner ------------------------------------------------------------------------


def ray_owner_ref(obj: Obj) -> Obj | None:
    """The controller reference into ray.io (a pod's RayCluster, a RayCluster's RayJob)."""
    ref = controller_ref(obj)
    return ref if ref is not None and ref_group(ref) == c.RAY_API_GROUP else None


def ray_owner(obj: Obj) -> tuple[str, str] | None:
    """(kind, name) of the Ray object controlling `obj`, to look up in a cache."""
    ref = ray_owner_ref(obj)
    if ref is None:
        return None
    kind, name = ref.get("kind"), ref.get("name")
    if kind in RAY_OBJECT_KINDS and isinstance(name, str):
        return kind, name
    return None


# --- what a cache keeps -----------------------------------------------------------------


def slim_raycluster(obj: Obj) -> dict[str, Any]:
    """The one cache transform for RayClusters (the admission side's and the controller's):
    kind, metadata, and each worker group's name, minimum and the workers it tells
    KubeRay to delete. A RayCluster's spec can be large; nothing else of it is read."""
    meta = metadata(obj)
    out: dict[str, Any] = {"kind": c.RAYCLUSTER_KIND,
                           "metadata": {k: meta[k] for k in METADATA_KEPT if k in meta}}
    if isinstance(obj.get("apiVersion"), str):
        out["apiVersion"] = obj["apiVersion"]
    groups = as_dict(obj.get("spec")).get("workerGroupSpecs")
    if isinstance(groups, list):
        out["spec"] = {"workerGroupSpecs": [_slim_group(g) for g in groups if isinstance(g, Mapping)]}
    return out


def _slim_group(group: Obj) -> dict[str, Any]:
    out = {k: group[k] for k in WORKER_GROUP_KEPT if k in group}
    victims = as_dict(group.get("scaleStrategy")).get("workersToDelete")
    if victims:
        out["scaleStrategy"] = {"workersToDelete": victims}
    return out
