"""What the tests read off a pod: raykueue's gate, running, its Ray role."""

from __future__ import annotations

from typing import Any

from raykueue.core import contract as c


def gated(pod: dict[str, Any]) -> bool:
    """raykueue's scheduling gate is on the pod (other gates do not count)."""
    return c.GATE in [g.get("name") for g in pod["spec"].get("schedulingGates") or []]


def running(pod: dict[str, Any]) -> bool:
    """Running and not on its way out."""
    return (pod.get("status") or {}).get("phase") == "Running" and not pod["metadata"].get(
        "deletionTimestamp")


def role(pod: dict[str, Any]) -> str:
    """KubeRay's node type label: "head", "worker" or "" for any other pod."""
    return pod["metadata"]["labels"].get(c.NODE_TYPE_LABEL, "")
