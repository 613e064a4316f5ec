"""Which of the Workloads that name a pod is the pod's own: one rule, read by
`decide`, head-first, the stuck-gate report and `raykueue explain`.

Only the deterministic name (`workload.workload_name`) can be the pod's
Workload: raykueue never creates another, so any other Workload of ours for
the pod is a duplicate (or a forgery, see `workload_match.mismatch`) that `decide`
finishes rather than trusts. Were each reader to choose on its own, the
report could call a pod "waiting for quota" because of a duplicate that the
controller is about to finish.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from raykueue.controller import pods as p
from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.core.objects import Obj, labels, metadata


@dataclass(frozen=True, slots=True)
class Claims:
    """The Workloads that name one pod, sorted by what they are to it."""

    # The pod's own Workload, finished or being deleted as it may be; None: none.
    current: Obj | None
    # Ours for this pod under another name, not being deleted, oldest first.
    duplicates: tuple[Obj, ...]
    # For this pod but not created by raykueue (Kueue's pod integration's).
    foreign: tuple[Obj, ...]
    # Ours for a pod of this name that no longer exists (or for no pod at all).
    stale: tuple[Obj, ...]


def claims(pod: Obj | None, workloads: Iterable[Obj]) -> Claims:
    """Sort the Workloads that name `pod` (None: the pod is gone)."""
    pod_uid = p.uid(pod) if pod is not None else ""
    ours: list[Obj] = []
    foreign: list[Obj] = []
    stale: list[Obj] = []
    for wl in workloads:
        if pod_uid and w.pod_uid_of(wl) == pod_uid:
            (ours if w.is_ours(wl) else foreign).append(wl)
        elif w.is_ours(wl):
            stale.append(wl)
    if pod is None:
        return Claims(None, (), tuple(foreign), tuple(stale))
    expected = w.workload_name(pod)
    named = [x for x in ours if p.name(x) == expected]
    # Two of that name only while one is being deleted and the next created.
    current = next((x for x in named if not p.is_deleting(x)), named[0] if named else None)
    duplicates = [x for x in ours if p.name(x) != expected and not p.is_deleting(x)]
    duplicates.sort(key=lambda x: (str(metadata(x).get("creationTimestamp")), p.name(x)))
    return Claims(current, tuple(duplicates), tuple(foreign), tuple(stale))


def current_workload(pod: Obj, workloads: Iterable[Obj]) -> Obj | None:
    """The pod's own Workload among those that name it, or None."""
    return claims(pod, workloads).current


def names_pod(wl: Obj, pod_name: str, pod_uid: str) -> bool:
    """Whether `wl` names the pod: its owner reference is to a pod of that name
    (this one or one before it), or, its owner reference removed by hand, it is
    ours and our pod-uid label is the pod's. A gang's base names no pod: its
    cluster's pass handles it."""
    owner = w.owner_pod(wl)
    if owner is not None:
        return owner[0] == pod_name
    return (w.is_ours(wl) and not labels(wl).get(c.GANG_LABEL)
            and w.pod_uid_of(wl) == pod_uid)
