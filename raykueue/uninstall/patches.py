"""The JSON patches `raykueue uninstall` applies: the suspend, and the hand-back to Kueue.

Each is guarded by the object's uid, so it applies to the object the plan saw
and never to a namesake made since.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from raykueue.core import contract as c
from raykueue.core.jsonpointer import pointer
from raykueue.core.objects import Obj, annotations, gate_names, metadata, spec
from raykueue.core.rayobjects import CLUSTER_SPEC, SUSPEND, get, templates
from raykueue.uninstall.world import autoscaling
from raykueue.webhooks.autoscaler_env import ALLOCATE_TIMEOUT_ENV, INJECTED_ANNOTATION

RAYKUEUE_PREFIX: Final = "raykueue.io/"


def suspend_patch(kind: str, obj: Obj) -> list[dict[str, Any]]:
    """JSON patch: suspended, and marked as suspended by the uninstall; for this object only (uid)."""
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid",
                                  "value": str(metadata(obj).get("uid") or "")}]
    mark = {c.SUSPENDED_BY_ANNOTATION: c.SUSPENDED_BY_UNINSTALL}
    if isinstance(metadata(obj).get("annotations"), Mapping):
        ops.append({"op": "add", "path": pointer("metadata", "annotations", c.SUSPENDED_BY_ANNOTATION),
                    "value": c.SUSPENDED_BY_UNINSTALL})
    else:
        ops.append({"op": "add", "path": pointer("metadata", "annotations"), "value": mark})
    ops.append({"op": "add", "path": pointer(*SUSPEND[kind]), "value": True})
    return ops


def _drop(meta_path: tuple[str, ...], entries: object, keep: Mapping[str, object] | None = None,
          ) -> list[dict[str, Any]]:
    """Remove the opt-in and every raykueue.io/ key from one labels or annotations map."""
    if not isinstance(entries, Mapping):
        return []
    return [{"op": "remove", "path": pointer(*meta_path, key)} for key in entries
            if (key == c.STANDALONE_ANNOTATION or key.startswith(RAYKUEUE_PREFIX))
            and not (keep and key in keep)]


def handback_patches(kind: str, obj: Obj, queue: str) -> list[list[dict[str, Any]]]:
    """JSON patches, applied in order, that give a suspended opted-in object to Kueue.

    Kueue validates an object once it has a queue: an autoscaled one must be an
    elastic job, and that annotation may not appear in the same update as the
    queue (it is immutable there), so it comes first, alone. Everything is
    guarded by the object's uid. The object stays suspended: Kueue resumes it
    when it admits its Workload.
    """
    uid = str(metadata(obj).get("uid") or "")
    guard = {"op": "test", "path": "/metadata/uid", "value": uid}
    patches: list[list[dict[str, Any]]] = []
    elastic = autoscaling(obj, kind)
    if elastic and annotations(obj).get(c.KUEUE_ELASTIC_JOB_ANNOTATION) != "true":
        patches.append([guard, {"op": "add",
                                "path": pointer("metadata", "annotations", c.KUEUE_ELASTIC_JOB_ANNOTATION),
                                "value": "true"}])
    ops: list[dict[str, Any]] = [guard]
    meta = metadata(obj)
    if isinstance(meta.get("labels"), Mapping):
        ops.append({"op": "add", "path": pointer("metadata", "labels", c.QUEUE_LABEL), "value": queue})
    else:
        ops.append({"op": "add", "path": pointer("metadata", "labels"), "value": {c.QUEUE_LABEL: queue}})
    ops += _drop(("metadata", "labels"), meta.get("labels"))
    ops += _drop(("metadata", "annotations"), meta.get("annotations"))
    ops += restore_allocate_timeout(kind, obj)
    for path, template in templates(obj, kind):
        tmeta = metadata(template)
        ops += _drop((*path, "metadata", "labels"), tmeta.get("labels"))
        ops += _drop((*path, "metadata", "annotations"), tmeta.get("annotations"))
        if elastic and kind == c.RAYCLUSTER_KIND and c.KUEUE_ELASTIC_JOB_GATE not in gate_names(template):
            gates = spec(template).get("schedulingGates")
            if isinstance(gates, list):
                ops.append({"op": "add", "path": pointer(*path, "spec", "schedulingGates", "-"),
                            "value": {"name": c.KUEUE_ELASTIC_JOB_GATE}})
            else:
                ops.append({"op": "add", "path": pointer(*path, "spec", "schedulingGates"),
                            "value": [{"name": c.KUEUE_ELASTIC_JOB_GATE}]})
    patches.append(ops)
    return patches


def restore_allocate_timeout(kind: str, obj: Obj) -> list[dict[str, Any]]:
    """JSON patch ops removing the autoscaler's allocate timeout raykueue injected.

    Kueue admits a handed-back cluster whole; its pods wait for no per-pod quota,
    so Ray's own timeout applies again. Only the value raykueue wrote (its
    annotation says which) goes, tested in place: a value the user set, or
    changed since, stays.
    """
    injected = annotations(obj).get(INJECTED_ANNOTATION)
    if kind != c.RAYCLUSTER_KIND or not injected:
        return []
    at = (*CLUSTER_SPEC[kind], "autoscalerOptions", "env")
    env = get(obj, at)
    if not isinstance(env, list):
        return []
    for i, var in enumerate(env):
        if (isinstance(var, Mapping) and var.get("name") == ALLOCATE_TIMEOUT_ENV
                and var.get("value") == injected and "valueFrom" not in var):
            return [{"op": "test", "path": pointer(*at, str(i)), "value": dict(var)},
                    {"op": "remove", "path": pointer(*at, str(i))}]
    return []
