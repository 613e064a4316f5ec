"""What raykueue does to an opted-in RayCluster, RayJob or RayService.

Kueue acts on a Ray object that carries the `kueue.x-k8s.io/queue-name` label:
its webhook suspends it and its reconciler admits the whole cluster as one
Workload. Its webhook also gives an unlabelled object the namespace's `default`
LocalQueue. For an opted-in object both would take the cluster away from
raykueue, so the object passes two of our webhooks around Kueue's (the API
server calls mutating configurations in name order):

- FIRST (configuration `aa-raykueue-first`, before Kueue's): the queue label of
  the object and of its pod templates moves to our annotation
  `raykueue.io/queue-name`, which Kueue never reads; a suspend the user asked for
  is noted so that the next stage can tell it from Kueue's.
- LAST (in `zz-raykueue-mutating`, after Kueue's): a queue label Kueue's
  defaulting added is removed and a suspend Kueue's defaulting set is undone.

Both are pure functions of the object and its opt-in; they are idempotent, so a
reinvocation or a repeated `kubectl apply` changes nothing more.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum

from raykueue.core import contract as c
from raykueue.core.jsonpointer import pointer
from raykueue.core.objects import Obj, annotations, metadata
from raykueue.webhooks.autoscaler_env import allocate_timeout_patch
from raykueue.webhooks.mutate import Patch, drop_entries, put_entries


class Stage(Enum):
    FIRST = "first"
    LAST = "last"


# Where each kind keeps its RayCluster spec (pod templates) and its suspend flag.
_CLUSTER_SPEC: dict[str, tuple[str, ...]] = {
    c.RAYCLUSTER_KIND: ("spec",),
    c.RAYJOB_KIND: ("spec", "rayClusterSpec"),
    c.RAYSERVICE_KIND: ("spec", "rayClusterConfig"),
}
_SUSPEND: dict[str, tuple[str, ...]] = {
    c.RAYCLUSTER_KIND: ("spec", "suspend"),
    c.RAYJOB_KIND: ("spec", "suspend"),
    c.RAYSERVICE_KIND: ("spec", "rayClusterConfig", "suspend"),
}
RAY_OBJECT_KINDS = tuple(_CLUSTER_SPEC)


@dataclass(frozen=True, slots=True)
class OptIn:
    """Whether the object is raykueue's, decided like a pod's opt-in: nearest annotation wins."""

    opted_in: bool
    where: str = ""
    invalid: str | None = None  # the bad value, to deny with


def opt_in(obj: Obj, owners: Sequence[Obj] = ()) -> OptIn:
    for source in (obj, *owners):
        value = annotations(source).get(c.STANDALONE_ANNOTATION)
        if value is None:
            continue
        where = f"{source.get('kind', 'object')} {metadata(source).get('name', '')}".strip()
        if value in c.STANDALONE_VALUES:
            return OptIn(value == "true", where)
        return OptIn(False, where, invalid=value)
    return OptIn(False)


def hide_from_kueue(obj: Obj, operation: str, stage: Stage, allocate_timeout: int | None = None) -> Patch:
    """The patch for an opted-in Ray object at one stage (see the module docstring).

    On CREATE the first stage also raises the Ray autoscaler's allocate timeout
    (webhooks/autoscaler_env.py) so that workers waiting for quota are not recycled.
    """
    kind = obj.get("kind")
    if kind not in _CLUSTER_SPEC:
        return []
    if stage is Stage.FIRST:
        ops = _move_queue(("metadata",), metadata(obj))
        cluster = _get(obj, _CLUSTER_SPEC[kind])
        if operation == "CREATE" and isinstance(cluster, dict):
            ops += allocate_timeout_patch(cluster, allocate_timeout, at=pointer(*_CLUSTER_SPEC[kind]))
        for where, template in _templates(obj, _CLUSTER_SPEC[kind]):
            ops += _move_queue((*where, "metadata"), _dict(template.get("metadata")))
        if operation == "CREATE" and _get(obj, _SUSPEND[kind]) is True:
            ops += put_entries(("metadata", "annotations"), metadata(obj).get("annotations"),
                               {c.SUSPEND_REQUESTED_ANNOTATION: "true"})
        return ops
    if operation != "CREATE":
        # Kueue's Ray webhooks default on CREATE only.
        return []
    ops = drop_entries(("metadata", "labels"), metadata(obj).get("labels"), [c.QUEUE_LABEL])
    requested = annotations(obj).get(c.SUSPEND_REQUESTED_ANNOTATION) == "true"
    if _get(obj, _SUSPEND[kind]) is True and not requested:
        ops.append({"op": "replace", "path": pointer(*_SUSPEND[kind]), "value": False})
    ops += drop_entries(("metadata", "annotations"), metadata(obj).get("annotations"),
                        [c.SUSPEND_REQUESTED_ANNOTATION])
    return ops


def _move_queue(meta_path: tuple[str, ...], meta: Obj) -> Patch:
    queue = _dict(meta.get("labels")).get(c.QUEUE_LABEL)
    if not queue:
        return []
    return [*drop_entries((*meta_path, "labels"), meta.get("labels"), [c.QUEUE_LABEL]),
            *put_entries((*meta_path, "annotations"), meta.get("annotations"), {c.QUEUE_ANNOTATION: queue})]


def _templates(obj: Obj, cluster_spec_path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Obj]]:
    cluster = _get(obj, cluster_spec_path)
    if not isinstance(cluster, dict):
        return
    head = _dict(_dict(cluster.get("headGroupSpec")).get("template"))
    if head:
        yield (*cluster_spec_path, "headGroupSpec", "template"), head
    groups = cluster.get("workerGroupSpecs")
    for i, group in enumerate(groups if isinstance(groups, list) else []):
        template = _dict(_dict(group).get("template"))
        if template:
            yield (*cluster_spec_path, "workerGroupSpecs", str(i), "template"), template


def _get(obj: Obj, path: tuple[str, ...]) -> object:
    node: object = obj
    for part in path:
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _dict(value: object) -> Obj:
    return value if isinstance(value, dict) else {}
