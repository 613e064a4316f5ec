"""Where an admitted pod goes: its flavors' placement, added at the gate lift."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from raykueue.controller import kueue_admission as adm
from raykueue.controller import pods as p
from raykueue.controller.actions import CONFLICT_NODE_SELECTOR, Action, LiftGate, ReportConflict, Wait
from raykueue.core.objects import Obj


def lift(pod: Obj, wl: Obj, known_flavors: Mapping[str, Obj],
         pod_set: str = adm.POD_SET) -> list[Action]:
    """The gate lift of an admitted pod, or why it cannot happen yet.

    The flavors' node labels and tolerations, and what admission checks ask
    for, are added to the pod; its own nodeSelector may not disagree with them
    (the API server only lets a gated pod's placement grow).
    """
    flavors = adm.assigned_flavors(wl, pod_set)
    missing = [f for f in flavors if f not in known_flavors]
    if missing:
        return [Wait(f"ResourceFlavor {', '.join(missing)} not in the cache yet")]
    wanted: dict[str, str] = {}
    wanted_tolerations: list[Mapping[str, Any]] = []
    for flavor in flavors:
        flavor_spec = known_flavors[flavor].get("spec") or {}
        wanted.update(flavor_spec.get("nodeLabels") or {})
        wanted_tolerations += [t for t in flavor_spec.get("tolerations") or []
                               if isinstance(t, dict)]
    for update in adm.admission_check_updates(wl, pod_set):
        wanted.update(update.get("nodeSelector") or {})
        wanted_tolerations += [t for t in update.get("tolerations") or [] if isinstance(t, dict)]

    own = p.node_selector(pod)
    clashes = sorted(k for k, v in wanted.items() if k in own and own[k] != v)
    if clashes:
        detail = ", ".join(f"{k}={own[k]!r} (flavor wants {wanted[k]!r})" for k in clashes)
        return [ReportConflict(
            CONFLICT_NODE_SELECTOR,
            f"pod {p.name(pod)} was admitted to flavor {', '.join(flavors)} but its own "
            f"nodeSelector disagrees: {detail}; the gate stays until the pod or the "
            "ResourceFlavor is changed",
            workload=p.name(wl))]
    add_selector = {k: v for k, v in wanted.items() if k not in own}
    have = [_toleration_key(t) for t in p.tolerations(pod)]
    add_tolerations: list[Mapping[str, Any]] = []
    for tol in wanted_tolerations:
        k = _toleration_key(tol)
        if k not in have:
            have.append(k)
            add_tolerations.append(tol)
    return [LiftGate(p.name(wl), add_selector, tuple(add_tolerations), tuple(flavors))]


def _toleration_key(tol: Mapping[str, Any]) -> tuple[Any, ...]:
    return (tol.get("key") or "", tol.get("operator") or "Equal", tol.get("value") or "",
            tol.get("effect") or "", tol.get("tolerationSeconds"))
