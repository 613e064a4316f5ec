"""Turning a Manage decision into the JSONPatch the API server applies.

The patch is idempotent: the API server may reinvoke a mutating webhook
(reinvocationPolicy IfNeeded) after another webhook changed the pod, and a
second pass over an already patched pod yields an empty patch rather than a
duplicate gate.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from raykueue.core import contract as c
from raykueue.core.jsonpointer import pointer
from raykueue.core.objects import Obj, gate_names, metadata, spec
from raykueue.webhooks.classify import Manage

Patch = list[dict[str, Any]]



def put_entries(where: tuple[str, ...], current: object, entries: Mapping[str, str]) -> Patch:
    """Set keys of a string map (labels, annotations) at `where`, creating the map if absent."""
    if not entries:
        return []
    if not isinstance(current, dict):
        return [{"op": "add", "path": pointer(*where), "value": dict(entries)}]
    return [{"op": "add", "path": pointer(*where, key), "value": value}
            for key, value in entries.items() if current.get(key) != value]


def drop_entries(where: tuple[str, ...], current: object, keys: Iterable[str]) -> Patch:
    if not isinstance(current, dict):
        return []
    return [{"op": "remove", "path": pointer(*where, key)} for key in keys if key in current]


def gate_patch(pod: Obj, decision: Manage) -> Patch:
    wanted = {
        c.QUEUE_LABEL: decision.queue,
        c.PRIORITY_CLASS_LABEL: decision.priority_class,
        c.MANAGED_BY_LABEL: c.MANAGED_BY_VALUE,
    }
    ops: Patch = untake_from_kueue(pod) if decision.taken_from_kueue else []
    cluster = (metadata(pod).get("labels") or {}).get(c.CLUSTER_LABEL)
    if decision.gang is not None and isinstance(cluster, str) and cluster:
        wanted[c.GANG_LABEL] = cluster
        ops += put_entries(("metadata", "annotations"), metadata(pod).get("annotations"), {
            c.GANG_MIN_ANNOTATION: json.dumps(dict(decision.gang), sort_keys=True,
                                              separators=(",", ":"))})
    ops += put_entries(("metadata", "labels"), metadata(pod).get("labels"), wanted)

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


def untake_from_kueue(pod: Obj) -> Patch:
    """Undo what Kueue's pod webhook did to an opted-in pod earlier in the same request.

    Nothing of Kueue's exists for the pod yet (no Workload is made before the pod
    is stored), so removing its label, gates, finalizer and role hash leaves the
    pod to raykueue alone; Kueue's pod reconciler ignores pods without the label.
    """
    ops: Patch = drop_entries(("metadata", "labels"), metadata(pod).get("labels"), [c.KUEUE_MANAGED_LABEL])
    ops += drop_entries(("metadata", "annotations"), metadata(pod).get("annotations"),
                        [c.KUEUE_ROLE_HASH_ANNOTATION])
    # Remove by index from the end so that earlier indexes stay valid.
    gates = gate_names(pod)
    for i in reversed(range(len(gates))):
        if gates[i] in (c.KUEUE_POD_GATE, c.KUEUE_TOPOLOGY_GATE):
            ops.append({"op": "remove", "path": f"/spec/schedulingGates/{i}"})
    finalizers = metadata(pod).get("finalizers")
    if isinstance(finalizers, list):
        for i in reversed(range(len(finalizers))):
            if finalizers[i] == c.KUEUE_POD_FINALIZER:
                ops.append({"op": "remove", "path": f"/metadata/finalizers/{i}"})
    return ops
