"""Readers of the pod state the lifecycle depends on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhooks import contract as c

# Shared with the webhook, so one rule decides both: `p.role`, `p.kueue_claims`.
from webhooks.classify import kueue_claims as kueue_claims
from webhooks.classify import role_of as role  # noqa: F401 - re-exported as p.role
from webhooks.objects import Obj, gate_names, labels, metadata, spec


def key(obj: Obj) -> tuple[str, str]:
    meta = metadata(obj)
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


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

