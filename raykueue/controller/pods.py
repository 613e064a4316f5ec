"""Readers of the pod state the lifecycle depends on."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

import orjson

from raykueue.core import contract as c
from raykueue.core.objects import Obj, gate_names, labels, metadata, spec


class SlimPod(dict[str, Any]):
    """A pod as the cache keeps it (`controller.caches.slim_pod`): the fields
    decisions read, plus two things read of the parts it drops.

    `sizing` is the fingerprint of what Kueue charges for the pod, which a
    Workload's podSets must match. `spec_json` is the whole spec as JSON bytes
    while a Workload may still be built from it (gated by us, or a gang
    member), None once that can no longer happen: bytes are several times
    smaller than the parsed spec. `copy.copy`/`copy.deepcopy` keep both.
    """

    # Slots, not an instance __dict__: that would be a dict more per cached pod.
    __slots__ = ("sizing", "spec_json")

    def __init__(self, obj: Mapping[str, Any], sizing: str, spec_json: bytes | None) -> None:
        super().__init__(obj)
        self.sizing = sizing
        self.spec_json = spec_json


def full_spec(pod: Obj) -> dict[str, Any]:
    """A fresh copy of the pod's whole spec, what a Workload's template is made of."""
    if isinstance(pod, SlimPod):
        if pod.spec_json is None:
            # `slim_pod` keeps it for every pod a Workload can still be built for.
            raise ValueError(f"pod {name(pod)}: its spec is not kept (not gated, not a gang member)")
        return orjson.loads(pod.spec_json)
    return copy.deepcopy(dict(spec(pod)))


def key(obj: Obj) -> tuple[str, str]:
    meta = metadata(obj)
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def name(obj: Obj) -> str:
    """Any object's name (pods and Workloads alike), "" when it has none."""
    return str(metadata(obj).get("name") or "")


def uid(obj: Obj) -> str:
    return str(metadata(obj).get("uid") or "")


def cluster(pod: Obj) -> str | None:
    value = labels(pod).get(c.CLUSTER_LABEL)
    return value if isinstance(value, str) and value else None


def is_gated(pod: Obj) -> bool:
    return c.GATE in gate_names(pod)


def phase(pod: Obj) -> str:
    status = pod.get("status")
    value = status.get("phase") if isinstance(status, dict) else None
    return value if isinstance(value, str) else ""


def is_terminal(pod: Obj) -> bool:
    return phase(pod) in ("Succeeded", "Failed")


def is_deleting(obj: Obj) -> bool:
    """Being deleted: a pod, a Workload or any object (the readers here serve them all)."""
    return bool(metadata(obj).get("deletionTimestamp"))


def is_ready(pod: Obj) -> bool:
    """Ready=True, the test Kueue's pod integration uses for PodsReady."""
    status = pod.get("status")
    conds = status.get("conditions") if isinstance(status, dict) else None
    for cond in conds if isinstance(conds, list) else []:
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def status_message(pod: Obj) -> str:
    status = pod.get("status")
    message = status.get("message") if isinstance(status, dict) else None
    return message if isinstance(message, str) else ""


def node_selector(pod: Obj) -> Mapping[str, str]:
    value = spec(pod).get("nodeSelector")
    return value if isinstance(value, dict) else {}


def tolerations(pod: Obj) -> list[Mapping[str, Any]]:
    value = spec(pod).get("tolerations")
    return [t for t in value if isinstance(t, dict)] if isinstance(value, list) else []


# What Kueue reads to size a pod (resources, overhead, sidecar init containers).
_SIZING_KEYS: Final = ("resources", "restartPolicy")


def _container_sizing(items: object) -> list[Any]:
    out: list[Any] = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict):
            out.append([item.get("name"), {k: item.get(k) for k in _SIZING_KEYS}])
        else:
            out.append(repr(item))
    return out


def sizing_fingerprint(pod_spec: object) -> str:
    """A digest of everything in a pod spec that decides the quota Kueue charges."""
    spec_ = pod_spec if isinstance(pod_spec, dict) else {}
    sizing = {
        "containers": _container_sizing(spec_.get("containers")),
        "initContainers": _container_sizing(spec_.get("initContainers")),
        "overhead": spec_.get("overhead"),
        "resources": spec_.get("resources"),
    }
    text = json.dumps(sizing, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
