"""Turning a Manage decision into the JSONPatch the API server applies.

The patch is idempotent: the API server may reinvoke a mutating webhook
(reinvocationPolicy IfNeeded) after another webhook changed the pod, and a
second pass over an already patched pod yields an empty patch rather than a
duplicate gate.
"""

from __future__ import annotations

from typing import Any

from webhooks import contract as c
from webhooks.classify import Manage
from webhooks.objects import Obj, gate_names, labels, metadata, spec

Patch = list[dict[str, Any]]


def pointer(*parts: str) -> str:
    """RFC 6901 JSON pointer; label keys contain '/' and must be escaped."""
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)


def gate_patch(pod: Obj, decision: Manage) -> Patch:
    wanted = {
        c.QUEUE_LABEL: decision.queue,
        c.PRIORITY_CLASS_LABEL: decision.priority_class,
        c.MANAGED_BY_LABEL: c.MANAGED_BY_VALUE,
    }
    ops: Patch = []
    current = labels(pod)
    if not isinstance(metadata(pod).get("labels"), dict):
        ops.append({"op": "add", "path": "/metadata/labels", "value": wanted})
    else:
        for key, value in wanted.items():
            if current.get(key) != value:
                ops.append({"op": "add", "path": pointer("metadata", "labels", key), "value": value})

    gate = {"name": c.GATE}
    if not isinstance(spec(pod).get("schedulingGates"), list):
        ops.append({"op": "add", "path": "/spec/schedulingGates", "value": [gate]})
    elif c.GATE not in gate_names(pod):
        # Appended after any existing gate: whoever added theirs keeps its place.
        ops.append({"op": "add", "path": "/spec/schedulingGates/-", "value": gate})

    if decision.pod_priority is not None:
        name, value = decision.pod_priority
        if spec(pod).get("priorityClassName") != name:
            ops.append({"op": "add", "path": "/spec/priorityClassName", "value": name})
        if spec(pod).get("priority") != value:
            ops.append({"op": "add", "path": "/spec/priority", "value": value})
    return ops
