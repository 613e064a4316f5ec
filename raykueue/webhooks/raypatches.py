"""The JSON patches the Ray-object stages answer with (webhooks/rayobjects.py).

The stamp on every pod template of an opted-in RayCluster (the pod webhook's
scope), the queue label moved to raykueue's annotation, the RayJob's submitter
noted for its head's Workload, the autoscaler's allocate timeout, and, on a
hand-over, all of it taken back. Pure functions of the object.
"""

from __future__ import annotations

from collections.abc import Mapping

from raykueue.core import contract as c
from raykueue.core import submitter
from raykueue.core.jsonpointer import pointer
from raykueue.core.objects import Obj, annotations, metadata
from raykueue.core.rayobjects import CLUSTER_SPEC, as_dict, get, is_head_template, is_suspended, templates
from raykueue.webhooks.autoscaler_env import INJECTED_ANNOTATION, allocate_timeout_patch
from raykueue.webhooks.mutate import Patch, drop_entries, put_entries
from raykueue.webhooks.rayrules import NamespaceFacts


def handover_patch(obj: Obj, facts: NamespaceFacts, why: str) -> Patch:
    """Kueue's from now on: templates unstamped, raykueue's queue as Kueue's label, a note."""
    meta = metadata(obj)
    queue = annotations(obj).get(c.QUEUE_ANNOTATION) or (
        c.DEFAULT_LOCAL_QUEUE if facts.default_queue_exists else None)
    ops = unstamp(obj)
    # The annotations map holds the opt-in, so it is there to add to.
    ops += drop_entries(("metadata", "annotations"), meta.get("annotations"), [c.QUEUE_ANNOTATION])
    ops += put_entries(("metadata", "annotations"), meta.get("annotations"),
                       {c.HANDED_TO_KUEUE_ANNOTATION: why})
    if queue:
        ops += put_entries(("metadata", "labels"), meta.get("labels"), {c.QUEUE_LABEL: queue})
    return ops


def first_patch(obj: Obj, operation: str, allocate_timeout: int | None) -> Patch:
    """An opted-in object as the first stage leaves it (webhooks/rayobjects.py)."""
    kind = str(obj.get("kind"))
    ops = move_queue(("metadata",), metadata(obj))
    if kind == c.RAYCLUSTER_KIND:
        # Pods are made from a RayCluster's templates: the stamp goes there, and
        # the allocate timeout too, on every update it is missing from (a
        # re-apply replaces `workerGroupSpecs` and `autoscalerOptions.env` whole).
        cluster = get(obj, CLUSTER_SPEC[kind])
        if isinstance(cluster, dict):
            timeout_ops = allocate_timeout_patch(cluster, allocate_timeout,
                                                 at=pointer(*CLUSTER_SPEC[kind]))
            if timeout_ops and allocate_timeout:
                ops += timeout_ops + put_entries(
                    ("metadata", "annotations"), metadata(obj).get("annotations"),
                    {INJECTED_ANNOTATION: str(int(allocate_timeout))})
        for where, template in templates(obj):
            meta = as_dict(template.get("metadata"))
            ops += move_queue((*where, "metadata"), meta)
            ops += _stamp((*where, "metadata"), template)
            if is_head_template(where):
                ops += _head_submitter((*where, "metadata"), template, annotations(obj))
    if kind == c.RAYJOB_KIND:
        ops += _rayjob_submitter(obj)
    if operation == "CREATE":
        suspended = is_suspended(obj, kind)
        meta_annotations = metadata(obj).get("annotations")
        if suspended:
            ops += put_entries(("metadata", "annotations"), meta_annotations,
                               {c.SUSPEND_REQUESTED_ANNOTATION: "true"})
        else:
            # KubeRay copies a RayJob's annotations onto its RayCluster: a note
            # from the RayJob's own creation says nothing about this one.
            ops += drop_entries(("metadata", "annotations"), meta_annotations,
                                [c.SUSPEND_REQUESTED_ANNOTATION])
    return ops


def _rayjob_submitter(obj: Obj) -> Patch:
    """The RayJob's submitter as its spec says (core/submitter.py), written on every
    update that reaches here: a value a user wrote by hand is replaced."""
    meta_annotations = metadata(obj).get("annotations")
    value = submitter.encode(submitter.pod_spec(obj))
    if value is None:
        return drop_entries(("metadata", "annotations"), meta_annotations, [c.SUBMITTER_ANNOTATION])
    return put_entries(("metadata", "annotations"), meta_annotations, {c.SUBMITTER_ANNOTATION: value})


def _head_submitter(meta_path: tuple[str, ...], template: Obj,
                    cluster_annotations: Mapping[str, str]) -> Patch:
    """The RayCluster's submitter (KubeRay copied the RayJob's annotations onto it)
    onto its head template, so the head pod's Workload reserves it; a head template
    never keeps one its cluster lacks. Runs after `_stamp`, which made the
    template's metadata if it had none."""
    value = cluster_annotations.get(c.SUBMITTER_ANNOTATION)
    current = as_dict(template.get("metadata")).get("annotations")
    if value is None:
        return drop_entries((*meta_path, "annotations"), current, [c.SUBMITTER_ANNOTATION])
    return put_entries((*meta_path, "annotations"), current, {c.SUBMITTER_ANNOTATION: value})


def _stamp(meta_path: tuple[str, ...], template: Obj) -> Patch:
    meta = template.get("metadata")
    if not isinstance(meta, dict):
        return [{"op": "add", "path": pointer(*meta_path),
                 "value": {"labels": {c.OPTED_IN_LABEL: c.OPTED_IN_VALUE}}}]
    return put_entries((*meta_path, "labels"), meta.get("labels"), {c.OPTED_IN_LABEL: c.OPTED_IN_VALUE})


def unstamp(obj: Obj) -> Patch:
    ops: Patch = []
    for where, template in templates(obj):
        ops += drop_entries((*where, "metadata", "labels"), as_dict(template.get("metadata")).get("labels"),
                            [c.OPTED_IN_LABEL])
    return ops


def move_queue(meta_path: tuple[str, ...], meta: Obj) -> Patch:
    queue = as_dict(meta.get("labels")).get(c.QUEUE_LABEL)
    if not queue:
        return []
    return [*drop_entries((*meta_path, "labels"), meta.get("labels"), [c.QUEUE_LABEL]),
            *put_entries((*meta_path, "annotations"), meta.get("annotations"), {c.QUEUE_ANNOTATION: queue})]
