"""Readers of the pod state the lifecycle depends on."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from webhooks import contract as c

# Shared with the webhook, so one rule decides both: `p.role`, `p.kueue_claims`.
from webhooks.classify import kueue_claims as kueue_claims
from webhooks.classify import role_of as role  # noqa: F401 - re-exported as p.role
from webhooks.objects import Obj, gate_names, labels, metadata, spec


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


def is_deleting(pod: Obj) -> bool:
    return bool(metadata(pod).get("deletionTimestamp"))


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
