"""The status we write on a Workload: server-side apply of the conditions we own."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from raykueue.controller.workload import KIND, OWNED_CONDITIONS, V1BETA2, api_version, condition
from raykueue.core.objects import Obj, metadata

# Kubernetes caps a condition message at 32768 bytes; Kueue truncates to 1024.
_MAX_MESSAGE: Final = 1024


@dataclass(frozen=True, slots=True)
class ConditionUpdate:
    type: str
    status: bool
    reason: str
    message: str


def truncate_message(message: str) -> str:
    if len(message) <= _MAX_MESSAGE:
        return message
    return message[: _MAX_MESSAGE - 3] + "..."


def reclaimable(wl: Obj) -> dict[str, int]:
    status = wl.get("status")
    items = status.get("reclaimablePods") if isinstance(status, dict) else None
    return {str(x.get("name")): int(x.get("count") or 0)
            for x in items if isinstance(x, dict)} if isinstance(items, list) else {}


def status_apply_body(wl: Obj, updates: Iterable[ConditionUpdate], now: str,
                      reclaim: Mapping[str, int] | None = None) -> dict[str, Any]:
    """Server-side apply body for the Workload's status subresource.

    A JSON merge patch would replace the whole conditions list and so clobber
    whatever Kueue wrote since our read. Under apply, `conditions` is a map
    keyed by type: we own the entries we send and nothing else. An applier
    that leaves out an entry it owned gives it up (and it is removed if no one
    else owns it), so each apply carries every condition we own (PodsReady,
    Finished) as it stands, plus the updates; likewise a gang base's
    `reclaimablePods` (ours alone), replaced by `reclaim` when given. As in `meta.SetStatusCondition`,
    lastTransitionTime moves only when the status flips.
    """
    wanted = {u.type: u for u in updates}
    entries: list[dict[str, Any]] = []
    generation = metadata(wl).get("generation")
    for type_ in OWNED_CONDITIONS:
        existing = condition(wl, type_)
        update = wanted.get(type_)
        if update is None:
            if existing is not None:
                entries.append(dict(existing))
            continue
        status = "True" if update.status else "False"
        transition = now
        if existing is not None and existing.get("status") == status and existing.get(
                "lastTransitionTime"):
            transition = str(existing["lastTransitionTime"])
        entry: dict[str, Any] = {
            "type": type_,
            "status": status,
            "reason": update.reason,
            "message": truncate_message(update.message),
            "lastTransitionTime": transition,
        }
        if isinstance(generation, int):
            entry["observedGeneration"] = generation
        entries.append(entry)
    version = str(wl.get("apiVersion") or api_version(V1BETA2))
    meta = metadata(wl)
    status: dict[str, Any] = {"conditions": entries}
    counts = dict(reclaim) if reclaim is not None else reclaimable(wl)
    if counts:
        status["reclaimablePods"] = [{"name": k, "count": n} for k, n in sorted(counts.items())]
    return {
        "apiVersion": version,
        "kind": KIND,
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
        "status": status,
    }
