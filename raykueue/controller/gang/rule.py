"""Gang start: a cluster's head and minimum workers as one Workload, extra workers per pod.

The rule, as a pure function of one opted-in gang cluster (docs/GANG.md):

- The *base* is one Workload with a podSet per group: `head` (1) and each worker
  group's `minReplicas`. Kueue admits it all or nothing; its pods are released
  together, and only once all of them exist.
- Every pod beyond the base is an *extra* with a Workload of its own (as without
  gang), created only once the base is admitted.
- A slot of the base is filled by a pod past the gate that has no Workload of
  its own. Slots are counted from the pods already released, never from the
  order of a snapshot: a pod is released under the base only while fewer
  released pods than the slots stand in its group.
- A base pod that goes (the autoscaler picks victims by idleness) leaves a
  vacancy. An extra of the same group moves in (its own Workload is deleted; the
  base's quota now stands for it); with no extra to move, the slot is handed
  back through the base's `status.reclaimablePods`, so Kueue frees its quota at
  once. Kueue never lets that count fall, so a pod created later in that group is
  an extra.
- `minReplicas` changed: a pending base no longer matching is made again; an
  admitted one cannot grow (Kueue refuses podSet changes while quota is
  reserved), so a raise leaves the pods beyond it extras until the base is next
  made; a lower moves the newest base pods out (a Workload of their own each,
  the slot handed back once that one is admitted).
- The head leaving ends the gang: the base is requeued whole (its pods proposed
  for removal, which `handlers.remove_pod` confirms live); the head is never
  preempted or admitted alone.
- A pod past the gate that no admitted Workload covers (none of its own, and no
  slot of an admitted base left for it) is a violation: it is proposed for
  removal, which no live read proves, so it is reported and kept.

So quota held always equals the pods that exist: base slots not reclaimed plus
admitted extras.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

HEAD_GROUP = "head"


@dataclass(frozen=True, slots=True)
class Member:
    """One live pod of the cluster, as the controller sees it."""

    uid: str
    group: str  # HEAD_GROUP or the worker group's name
    created: str  # creationTimestamp, then uid, orders pods for "oldest first"
    own_workload: bool = False  # an extra: it has a live Workload of its own
    released: bool = False  # past the gate: seen ungated, or lifted by us
    own_admitted: bool = False  # its own Workload is admitted, so it covers the pod
    fits: bool = True  # it requests what the base's podSet for its group requests
    going: bool = False  # KubeRay is told to delete it (workersToDelete)


@dataclass(frozen=True, slots=True)
class Base:
    """The base Workload as it stands: created? admitted? its podSets, slots handed back."""

    exists: bool = False
    admitted: bool = False
    reclaimed: Mapping[str, int] = field(default_factory=dict)
    # podSet counts as Kueue charges them; None: as the rule would make them now.
    counts: Mapping[str, int] | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    create_base: bool = False  # every base pod exists and there is no base Workload yet
    remake_base: bool = False  # a pending base no longer matches minReplicas: delete it
    release: tuple[str, ...] = ()  # gated pods to ungate under the base (it is admitted)
    extras: tuple[str, ...] = ()  # pods that get (or keep) a Workload of their own
    move_in: tuple[str, ...] = ()  # extras whose own Workload goes: they fill a vacancy
    move_out: tuple[str, ...] = ()  # released base pods that get a Workload of their own
    reclaim: Mapping[str, int] = field(default_factory=dict)  # new reclaimablePods counts
    requeue: bool = False  # the head is gone: evict the base whole
    uncovered: tuple[str, ...] = ()  # released, no admitted Workload covers them: evict
    standing: tuple[str, ...] = ()  # pods the admitted base covers after this pass
    waiting: str = ""  # why nothing moves yet, for explain


def minimum(worker_min_replicas: Mapping[str, int]) -> dict[str, int]:
    """Base podSet counts: the head and each group's minReplicas (groups with 0 have no podSet)."""
    out = {HEAD_GROUP: 1}
    out.update({group: n for group, n in worker_min_replicas.items() if n > 0})
    return out


def _oldest(members: Sequence[Member]) -> list[Member]:
    return sorted(members, key=lambda m: (m.created, m.uid))


def _uids(members: Sequence[Member]) -> list[str]:
    return [m.uid for m in members]


def _uncovered(members: Sequence[Member]) -> list[str]:
    """With no admitted base, a released pod is covered only by an admitted Workload of its own."""
    return [m.uid for m in _oldest(members) if m.released and not m.own_admitted]


def plan(members: Sequence[Member], mins: Mapping[str, int], base: Base,
         unseen: Mapping[str, int] | None = None) -> Plan:
    """`unseen`: per group, pods this controller released under the base that `members`
    lacks (its snapshot is behind them): they stand in their slots all the same."""
    by_group: dict[str, list[Member]] = {}
    for m in members:
        by_group.setdefault(m.group, []).append(m)

    if not base.exists:
        uncovered = tuple(_uncovered(members))
        if not any(m.group == HEAD_GROUP for m in members):
            return Plan(uncovered=uncovered, waiting="waiting for the head pod")
        missing = {g: n - len(by_group.get(g, [])) for g, n in mins.items()}
        missing = {g: n for g, n in missing.items() if n > 0}
        if missing:
            text = ", ".join(f"{n} of group {g}" for g, n in sorted(missing.items()))
            return Plan(uncovered=uncovered,
                        waiting=f"waiting for every base pod to exist: {text} missing")
        return Plan(create_base=True, uncovered=uncovered, waiting="base Workload to be created")

    counts = dict(base.counts) if base.counts is not None else dict(mins)
    if not base.admitted:
        # Before admission every pod without a Workload may still be a base pod;
        # the oldest fill the slots, the rest are extras (for explain).
        extras = [m.uid for group, group_members in by_group.items()
                  for m in _oldest([x for x in group_members if not x.own_workload])[
                      counts.get(group, 0):]]
        remake = counts != dict(mins)
        waiting = ("the base no longer matches minReplicas: made again" if remake
                   else "waiting for Kueue to admit the base")
        return Plan(extras=tuple(extras), remake_base=remake, uncovered=tuple(_uncovered(members)),
                    waiting=waiting)

    if not any(m.group == HEAD_GROUP and not m.own_workload for m in members):
        return Plan(requeue=True, waiting="the head is gone: the base is requeued whole")

    out = _Admitted(reclaim=dict(base.reclaimed))
    # The head's group first: its pod is released first, as without gang.
    for group in sorted(set(counts) | set(mins) | set(by_group), key=lambda x: (x != HEAD_GROUP, x)):
        held = counts.get(group, 0) - base.reclaimed.get(group, 0)
        # A lowered minReplicas shrinks the slots; a raised one cannot grow them.
        target = min(mins.get(group, 0), held)
        out.group(by_group.get(group, []), held, target, (unseen or {}).get(group, 0))
        if out.keep < held:
            out.reclaim[group] = base.reclaimed.get(group, 0) + held - out.keep
    # reclaimablePods is written whole (every podSet's count), and only when it changes.
    reclaim = out.reclaim if out.reclaim != dict(base.reclaimed) else {}
    return Plan(release=tuple(out.release), extras=tuple(out.extras), move_in=tuple(out.move_in),
                move_out=tuple(out.move_out), reclaim=reclaim, uncovered=tuple(out.uncovered),
                standing=tuple(out.standing))


@dataclass
class _Admitted:
    """The plan of an admitted base, built group by group."""

    release: list[str] = field(default_factory=list)
    extras: list[str] = field(default_factory=list)
    move_in: list[str] = field(default_factory=list)
    move_out: list[str] = field(default_factory=list)
    uncovered: list[str] = field(default_factory=list)
    reclaim: dict[str, int] = field(default_factory=dict)
    standing: list[str] = field(default_factory=list)
    keep: int = 0  # slots of the group this pass leaves a pod standing in

    def group(self, members: Sequence[Member], held: int, target: int, unseen: int) -> None:
        # Pods leaning on the base: released without a Workload of their own, or
        # moving out (their own Workload not admitted yet). The oldest hold the
        # slots; any beyond `held` are covered by nothing.
        leaning = _oldest([m for m in members if m.released and not m.own_admitted])
        over = leaning[max(held, 0):]
        self.uncovered += _uids(over)
        standing = leaning[:max(held, 0)]
        placed = [m for m in standing if not m.own_workload]
        moving = [m for m in standing if m.own_workload]
        # More placed than the (lowered) minimum: the newest move out. A pod KubeRay
        # is told to delete stands in its slot until it goes, but is never planned
        # on: the minimum and the victims usually change in one write. Pods the
        # snapshot lacks only ever hold a release back, never push one out.
        self.move_out += _uids([m for m in placed if not m.going][target:])
        vacancies = max(target - len(placed) - unseen, 0)
        gated = _oldest([m for m in members if not m.released and not m.own_workload])
        released = [m for m in gated if m.fits and not m.going][:vacancies]
        self.release += _uids(released)
        self.extras += [m.uid for m in gated if m not in released and not m.going]
        vacancies -= len(released)
        gone = {m.uid for m in over}
        have_own = _oldest([m for m in members if m.own_workload and m.uid not in gone])
        movers = [m for m in have_own if m.fits and not m.going][:vacancies]
        self.move_in += _uids(movers)
        self.release += [m.uid for m in movers if not m.released]
        self.extras += [m.uid for m in have_own if m not in movers]
        standing = {m.uid: m for m in [*placed, *moving, *released, *movers]}
        self.standing += list(standing)
        self.keep = min(len(standing) + unseen, max(held, 0))


def quota_held(mins: Mapping[str, int], base: Base, admitted_extras: int) -> int:
    """Pods' worth of quota Kueue holds for the cluster: unreclaimed base slots plus extras."""
    counts = base.counts if base.counts is not None else mins
    slots = sum(n - base.reclaimed.get(g, 0) for g, n in counts.items()) if base.admitted else 0
    return slots + admitted_extras
