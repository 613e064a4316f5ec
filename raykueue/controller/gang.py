"""Gang start: a cluster's head and minimum workers as one Workload, extra workers per pod.

The rule, as a pure function of one opted-in gang cluster (docs/GANG.md):

- The *base* is one Workload with a podSet per group: `head` (1) and each worker
  group's `minReplicas`. Kueue admits it all or nothing; its pods are released
  together, and only once all of them exist.
- Every pod beyond the base is an *extra* with a Workload of its own (as without
  gang), created only once the base is admitted.
- A base pod that goes (the autoscaler picks victims by idleness) leaves a
  vacancy. An extra of the same group moves in (its own Workload is deleted; the
  base's quota now stands for it); with no extra to move, the slot is handed
  back through the base's `status.reclaimablePods`, so Kueue frees its quota at
  once. Kueue never lets that count fall, so a pod created later in that group is
  an extra.
- The head leaving ends the gang: the base is requeued whole (its pods evicted
  and recreated gated); the head is never preempted or admitted alone.

So quota held always equals the pods that exist: base slots not reclaimed plus
admitted extras.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

HEAD_GROUP = "head"
# Key names of gang clusters' passes (`controller.gang_decide`); ':' is in no pod name.
KEY_PREFIX = "gang:"


@dataclass(frozen=True, slots=True)
class Member:
    """One live pod of the cluster, as the controller sees it."""

    uid: str
    group: str  # HEAD_GROUP or the worker group's name
    created: str  # creationTimestamp, then uid, orders pods for "oldest first"
    own_workload: bool = False  # an extra: it has a Workload of its own


@dataclass(frozen=True, slots=True)
class Base:
    """The base Workload as it stands: created? admitted? slots handed back per group."""

    exists: bool = False
    admitted: bool = False
    reclaimed: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Plan:
    create_base: bool = False  # every base pod exists and there is no base Workload yet
    release: tuple[str, ...] = ()  # base pods to ungate (the base is admitted)
    extras: tuple[str, ...] = ()  # pods that get (or keep) a Workload of their own
    move_in: tuple[str, ...] = ()  # extras whose own Workload goes: they fill a vacancy
    reclaim: Mapping[str, int] = field(default_factory=dict)  # new reclaimablePods counts
    requeue: bool = False  # the head is gone: evict the base whole
    waiting: str = ""  # why nothing moves yet, for explain


def minimum(worker_min_replicas: Mapping[str, int]) -> dict[str, int]:
    """Base podSet counts: the head and each group's minReplicas (groups with 0 have no podSet)."""
    out = {HEAD_GROUP: 1}
    out.update({group: n for group, n in worker_min_replicas.items() if n > 0})
    return out


def _oldest(members: Sequence[Member]) -> list[Member]:
    return sorted(members, key=lambda m: (m.created, m.uid))


def plan(members: Sequence[Member], mins: Mapping[str, int], base: Base) -> Plan:
    by_group: dict[str, list[Member]] = {}
    for m in members:
        by_group.setdefault(m.group, []).append(m)

    if not base.exists:
        if not any(m.group == HEAD_GROUP for m in members):
            return Plan(waiting="waiting for the head pod")
        missing = {g: n - len(by_group.get(g, [])) for g, n in mins.items()}
        missing = {g: n for g, n in missing.items() if n > 0}
        if missing:
            text = ", ".join(f"{n} of group {g}" for g, n in sorted(missing.items()))
            return Plan(waiting=f"waiting for every base pod to exist: {text} missing")
        return Plan(create_base=True, waiting="base Workload to be created")

    if base.admitted and not any(m.group == HEAD_GROUP and not m.own_workload for m in members):
        return Plan(requeue=True, waiting="the head is gone: the base is requeued whole")

    release: list[str] = []
    extras: list[str] = []
    move_in: list[str] = []
    reclaim = dict(base.reclaimed)
    for group, n in mins.items():
        slots = n - base.reclaimed.get(group, 0)
        group_members = by_group.get(group, [])
        in_base = _oldest([m for m in group_members if not m.own_workload])
        have_own = _oldest([m for m in group_members if m.own_workload])
        # Before admission every pod without a Workload may still be a base pod;
        # the oldest fill the slots, the rest are extras.
        release += [m.uid for m in in_base[:slots]]
        surplus = in_base[slots:]
        extras += [m.uid for m in surplus]
        if not base.admitted:
            continue
        vacancies = slots - len(in_base)
        movers = have_own[:max(vacancies, 0)]
        move_in += [m.uid for m in movers]
        release += [m.uid for m in movers]
        vacancies -= len(movers)
        extras += [m.uid for m in have_own[len(movers):]]
        if vacancies > 0:
            reclaim[group] = base.reclaimed.get(group, 0) + vacancies
    for group, group_members in by_group.items():
        if group not in mins:
            extras += [m.uid for m in group_members]

    if not base.admitted:
        return Plan(extras=tuple(extras), waiting="waiting for Kueue to admit the base")
    return Plan(release=tuple(release), extras=tuple(extras), move_in=tuple(move_in),
                reclaim=reclaim if reclaim != dict(base.reclaimed) else {})


def quota_held(mins: Mapping[str, int], base: Base, admitted_extras: int) -> int:
    """Pods' worth of quota Kueue holds for the cluster: unreclaimed base slots plus extras."""
    slots = sum(n - base.reclaimed.get(g, 0) for g, n in mins.items()) if base.admitted else 0
    return slots + admitted_extras
