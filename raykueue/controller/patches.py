"""Request bodies for the pod writes: pure, so their exact shape is tested."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from raykueue.controller import pods as p
from raykueue.core import contract as c
from raykueue.core.jsonpointer import pointer
from raykueue.core.objects import Obj, gate_names, metadata, spec


def lift_gate_ops(pod: Obj, node_selector: Mapping[str, str],
                  tolerations: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One JSON patch: test + remove the gate, add the flavors' placement.

    The `test` ops make the patch fail (422) instead of clobbering when our
    cache is stale: the gate must still sit at the index we read, and the pod
    must still be the same pod (a namesake would have another uid). The API
    server lets a gated pod's nodeSelector and tolerations grow, which is why
    placement goes in the same patch as the gate: once the gate is gone they
    are frozen.
    """
    index = gate_names(pod).index(c.GATE)
    gate_path = f"/spec/schedulingGates/{index}"
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/uid", "value": p.uid(pod)},
        {"op": "test", "path": gate_path, "value": {"name": c.GATE}},
        {"op": "remove", "path": gate_path},
    ]
    if node_selector:
        if isinstance(spec(pod).get("nodeSelector"), dict):
            ops += [{"op": "add", "path": pointer("spec", "nodeSelector", k), "value": v}
                    for k, v in node_selector.items()]
        else:
            ops.append({"op": "add", "path": "/spec/nodeSelector", "value": dict(node_selector)})
    if tolerations:
        if isinstance(spec(pod).get("tolerations"), list):
            ops += [{"op": "add", "path": "/spec/tolerations/-", "value": dict(t)}
                    for t in tolerations]
        else:
            ops.append({"op": "add", "path": "/spec/tolerations",
                        "value": [dict(t) for t in tolerations]})
    return ops


def evicted_condition_body(pod: Obj, reason: str, message: str, now: str) -> dict[str, Any]:
    """Server-side apply body for the pod's status: our condition only.

    Written before the delete so that `kubectl describe` of the terminating
    pod, and anything watching it, sees why it went (Kueue's pod integration
    writes its TerminationTarget condition the same way).
    """
    meta = metadata(pod)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"),
                     "uid": meta.get("uid")},
        "status": {"conditions": [{
            "type": c.EVICTED_CONDITION,
            "status": "True",
            "reason": _reason(reason),
            "message": message[:1024],
            "lastTransitionTime": now,
        }]},
    }


def delete_options(pod: Obj) -> dict[str, Any]:
    """Delete only this pod, not a namesake created since our read."""
    return {"apiVersion": "v1", "kind": "DeleteOptions",
            "preconditions": {"uid": p.uid(pod)}}


def _reason(reason: str) -> str:
    # Condition reasons are CamelCase identifiers; Kueue's always are, but a
    # wrong one would make the whole status write fail.
    cleaned = "".join(ch for ch in reason if ch.isalnum() or ch in "_,:")
    return cleaned if cleaned[:1].isalpha() else "Evicted"
