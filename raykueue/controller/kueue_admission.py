"""What Kueue's admission of a Workload says: where, with which flavors, and
what admission checks ask of the pod. Pure functions over parsed JSON."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from raykueue.controller.workload import POD_SET
from raykueue.core.objects import Obj


def _pod_set_assignment(wl: Obj, pod_set: str = POD_SET) -> Mapping[str, Any] | None:
    status = wl.get("status")
    admission = status.get("admission") if isinstance(status, dict) else None
    if not isinstance(admission, dict):
        return None
    for psa in admission.get("podSetAssignments") or []:
        if isinstance(psa, dict) and psa.get("name", POD_SET) == pod_set:
            return psa
    return None


def cluster_queue(wl: Obj) -> str | None:
    status = wl.get("status")
    admission = status.get("admission") if isinstance(status, dict) else None
    if isinstance(admission, dict) and isinstance(admission.get("clusterQueue"), str):
        return admission["clusterQueue"]
    return None


def assigned_flavors(wl: Obj, pod_set: str = POD_SET) -> list[str]:
    """Distinct ResourceFlavors assigned to the podSet, in resource-name order."""
    psa = _pod_set_assignment(wl, pod_set)
    flavors = psa.get("flavors") if psa else None
    if not isinstance(flavors, dict):
        return []
    out: list[str] = []
    for resource in sorted(flavors):
        name = flavors[resource]
        if isinstance(name, str) and name not in out:
            out.append(name)
    return out


def admission_check_updates(wl: Obj, pod_set: str = POD_SET) -> list[Mapping[str, Any]]:
    """podSetUpdates that admission checks ask to apply to the pod at start."""
    status = wl.get("status")
    checks = status.get("admissionChecks") if isinstance(status, dict) else None
    out: list[Mapping[str, Any]] = []
    for check in checks if isinstance(checks, list) else []:
        if not isinstance(check, dict):
            continue
        for update in check.get("podSetUpdates") or []:
            if isinstance(update, dict) and update.get("name", POD_SET) == pod_set:
                out.append(update)
    return out
