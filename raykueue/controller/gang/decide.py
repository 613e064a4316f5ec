"""What to do for one gang cluster, given its pods and Workloads: no I/O.

`gang.rule.plan` is the rule; this turns it into actions (each for a pod, or
for the base itself). The per-pod `controller.decide` keeps doing everything for
an extra that has a Workload of its own (gate lift, readiness, release); what it
does in place of that for a gang pod is `gang.member`. Building and trusting the
base is `gang.base`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from raykueue.controller import placement, removal
from raykueue.controller import pods as p
from raykueue.controller import workload as w
from raykueue.controller.actions import (
    CONFLICT_FORGED_WORKLOAD,
    FINISHED_EVICTED,
    GANG_MOVED_IN,
    GANG_REMADE,
    GANG_REQUEUED,
    GANG_UNCOVERED,
    WARN_PRIORITY_CLASS,
    Action,
    CreateWorkload,
    DeleteWorkload,
    EvictPod,
    ReportConflict,
    SetPodsReady,
    SetReclaimable,
    Wait,
    Warn,
)
from raykueue.controller.gang import base as gb
from raykueue.controller.gang import rule as g
from raykueue.core import contract as c
from raykueue.core.objects import Obj, labels, metadata
from raykueue.core.podrole import role_of
from raykueue.core.priority import Missing, workload_priority

ROLE: Final = "gang"

Step = tuple[str | None, Action]  # (pod name, or None for the base), action


@dataclass(frozen=True, slots=True)
class GangContext:
    version: str = w.V1BETA2
    pods_ready: bool = True
    flavors: Mapping[str, Obj] = field(default_factory=dict)
    priority_values: Mapping[str, int] = field(default_factory=dict)
    # The RayCluster itself is gone or going (asked only when the head is gone, or pods
    # are past the gate with no base): its pods go with it, so there is nothing to
    # requeue or evict, only the base to delete.
    cluster_gone: bool = False
    # Each worker group's minReplicas x numOfHosts as the RayCluster says now; None
    # when it is not known, and the counts the webhook stamped on the pods serve.
    min_replicas: Mapping[str, int] | None = None
    # uid -> group of pods this controller released under the base and has not
    # seen go: they hold their slots even where a snapshot is behind them.
    released: Mapping[str, str] = field(default_factory=dict)
    # Pods the RayCluster tells KubeRay to delete next: going, so no slot is planned on them.
    victims: frozenset[str] = frozenset()


def _leaving(wl: Obj | None) -> bool:
    """An extra whose own Workload Kueue evicted or that ended: the per-pod pass deletes it."""
    return wl is not None and (w.is_evicted(wl) or w.is_finished(wl))


def members(pods: Sequence[Obj], own: Mapping[str, Obj], base: Obj | None,
            released: Mapping[str, str] | None = None,
            victims: frozenset[str] = frozenset()) -> list[g.Member]:
    """Live pods (not being deleted, not ended, not leaving) as the rule sees them."""
    released = released or {}
    out: list[g.Member] = []
    for x in pods:
        uid = p.uid(x)
        wl = own.get(uid)
        if p.is_deleting(x) or p.is_terminal(x) or _leaving(wl):
            continue
        out.append(g.Member(
            uid, gb.group_of(x), str(metadata(x).get("creationTimestamp") or ""),
            own_workload=wl is not None, released=not p.is_gated(x) or uid in released,
            own_admitted=wl is not None and w.is_admitted(wl),
            fits=base is None or gb.fits(x, base), going=p.name(x) in victims))
    return out


def _unseen(pods: Sequence[Obj], released: Mapping[str, str]) -> dict[str, int]:
    seen = {p.uid(x) for x in pods}
    out: dict[str, int] = {}
    for uid, group in released.items():
        if uid not in seen:
            out[group] = out.get(group, 0) + 1
    return out


def _priority(pod: Obj, ctx: GangContext) -> w.Priority | Warn | None:
    found = workload_priority(labels(pod).get(c.PRIORITY_CLASS_LABEL), ctx.priority_values, p.name(pod))
    return Warn(WARN_PRIORITY_CLASS, found.message) if isinstance(found, Missing) else (
        found and w.Priority(*found))


def _requeue(base: Obj, live: Sequence[Obj], standing: Sequence[Obj], reason: str,
             message: str) -> list[Step]:
    """The gang goes back to its start: every pod is proposed for removal (KubeRay
    recreates them gated) and the base deleted. The extras too: a Ray worker serves
    nothing without its head, and Kueue, preempting the base, may leave an extra it took
    first admitted (it adds back what the preemptor does not need).

    A gated pod runs nothing and is left for the next base. Each removal goes through
    `handlers.remove_pod`, which deletes only what the live
    reads prove (Kueue evicted the pod's Workload, the base for a base pod) and reports
    the rest. The base goes only once no pod it covers still runs
    (`standing`): its quota is held until they have stopped.
    """
    steps: list[Step] = [(p.name(x), EvictPod(p.name(base), reason, message,
                                              role_of(x) == c.ROLE_HEAD))
                         for x in live if not p.is_deleting(x) and not p.is_gated(x)]
    if p.is_deleting(base):
        return steps
    if standing:
        names = ", ".join(sorted(p.name(x) for x in standing))
        return [*steps, (None, Wait(f"base Workload {p.name(base)} holds its quota until its "
                                    f"pods have stopped: {names}"))]
    return [*steps, (None, DeleteWorkload(p.name(base), p.uid(base), reason, message))]


def _refuse(base: Obj, head: Obj, live: Sequence[Obj], in_base: Sequence[Obj],
            standing: Sequence[Obj], why: str) -> list[Step]:
    """A base that is not the one raykueue makes: reported, and deleted to be made again.

    If pods were released under it, the gang is requeued whole (their quota was never
    what they ask).
    """
    message = (f"Workload {p.name(base)} stands as gang {labels(head).get(c.GANG_LABEL)}'s base "
               f"but is not the one raykueue makes ({why}); it is deleted and made again")
    steps: list[Step] = [(p.name(head), ReportConflict(CONFLICT_FORGED_WORKLOAD, message,
                                                        workload=p.name(base)))]
    if any(not p.is_gated(x) for x in in_base):
        return steps + _requeue(base, live, standing, CONFLICT_FORGED_WORKLOAD, message)
    return [*steps, (None, DeleteWorkload(p.name(base), p.uid(base), CONFLICT_FORGED_WORKLOAD, message))]


def _mins(live: Sequence[Obj], heads: Sequence[Obj], ctx: GangContext) -> dict[str, int] | None:
    if ctx.min_replicas is not None:
        return g.minimum(ctx.min_replicas)
    return next((m for m in (gb.mins_of(x) for x in [*heads, *live]) if m is not None), None)


def decide_gang(pods: Sequence[Obj], own: Mapping[str, Obj], base: Obj | None,
                ctx: GangContext) -> tuple[list[Step], g.Plan]:
    """`own`: pod uid -> its own (extra) Workload, ours and not being deleted."""
    by_uid = {p.uid(x): x for x in pods}
    live = [x for x in pods if not (p.is_deleting(x) or p.is_terminal(x))]
    heads = sorted((x for x in live if role_of(x) == c.ROLE_HEAD),
                   key=lambda x: str(metadata(x).get("creationTimestamp")))
    # Pods the base covers that still run (being deleted included): the base keeps
    # their quota until they have stopped (a long grace period or preStop hook may
    # keep one running for a day, and KubeRay's replacement queues meanwhile).
    standing = [x for x in pods if p.uid(x) not in own and not removal.has_stopped(x)]
    if base is not None and not p.is_deleting(base) and not live and not standing:
        # Every pod of the gang has stopped or gone: the base's quota is free to go.
        return [(None, DeleteWorkload(p.name(base), p.uid(base), GANG_REQUEUED,
                                      "every pod of the gang has stopped or gone"))], g.Plan()
    mins = _mins(live, heads, ctx)
    if mins is None:
        return [(None, Wait("no gang pod carries its base counts"))], g.Plan()
    if base is not None and p.is_deleting(base):
        return [(None, Wait(f"base Workload {p.name(base)} is being deleted"))], g.Plan()
    in_base = [x for x in live if p.uid(x) not in own]
    if base is not None and heads:
        why = gb.mismatch(base, heads[0], [x for x in in_base if not p.is_gated(x)])
        if why is not None:
            return _refuse(base, heads[0], live, in_base, standing, why), g.Plan(waiting=why)
    state = gb.base_state(base)
    plan = g.plan(members(pods, own, base, ctx.released, ctx.victims), mins, state,
                  _unseen(pods, ctx.released))

    if base is not None and w.is_evicted(base):
        cond = w.condition(base, w.EVICTED) or {}
        return _requeue(base, live, standing, str(cond.get("reason") or FINISHED_EVICTED),
                        str(cond.get("message") or "evicted by Kueue")), plan
    if base is None and ctx.cluster_gone:
        return [(None, Wait("the RayCluster is gone: its pods go with it"))], plan
    if plan.requeue and base is not None and ctx.cluster_gone:
        if standing:
            return [(None, Wait("the RayCluster is gone: the base is deleted once its pods "
                                "have stopped"))], plan
        return [(None, DeleteWorkload(p.name(base), p.uid(base), GANG_REQUEUED,
                                      "the RayCluster is gone: its pods go with it"))], plan
    if plan.requeue and base is not None:
        return _requeue(base, live, standing, GANG_REQUEUED, "the gang's head is gone"), plan

    steps = _evict_uncovered([by_uid[u] for u in plan.uncovered], base)
    if plan.create_base:
        return steps + _create_base(live, heads, mins, ctx), plan
    if plan.remake_base and base is not None:
        message = (f"minReplicas is now {gb.describe_counts(mins)}, the pending base asks "
                   f"{gb.describe_counts(gb.spec_counts(base))}: it is made again")
        return [*steps, (None, DeleteWorkload(p.name(base), p.uid(base), GANG_REMADE, message))], plan
    if base is None or not state.admitted:
        return [*steps, (None, Wait(plan.waiting))], plan
    return steps + _admitted(plan, base, by_uid, own, ctx), plan


def _evict_uncovered(pods: Sequence[Obj], base: Obj | None) -> list[Step]:
    """Proposed removals: no admitted Workload covers these pods. Neither cause of
    `removal` proves that (the pod's own Workload is not Kueue's eviction, nor one left
    not admitted), so the handler reports them and keeps them: nothing is destroyed
    on a belief."""
    where = f"the gang's base {p.name(base)} has no slot left for it" if base is not None \
        else "the gang has no base Workload"
    return [(p.name(x), EvictPod("", GANG_UNCOVERED,
                                 f"pod {p.name(x)} is past the gate but no admitted Workload "
                                 f"covers it ({where})", role_of(x) == c.ROLE_HEAD))
            for x in pods]


def _create_base(live: Sequence[Obj], heads: Sequence[Obj], mins: Mapping[str, int],
                 ctx: GangContext) -> list[Step]:
    head = heads[0]
    priority = _priority(head, ctx)
    if isinstance(priority, Warn):
        return [(p.name(head), priority)]
    ref = gb.raycluster_ref(head)
    if ref is None:
        return [(None, Wait("the head pod has no RayCluster owner"))]
    oldest: dict[str, Obj] = {}
    for x in sorted(live, key=lambda x: (str(metadata(x).get("creationTimestamp")), p.uid(x))):
        oldest.setdefault(gb.group_of(x), x)
    name = gb.base_name(str(labels(head).get(c.CLUSTER_LABEL)), str(ref["uid"]))
    return [(None, CreateWorkload(gb.build_base(name, head, oldest, mins, priority, ctx.version),
                                  ROLE))]


def _admitted(plan: g.Plan, base: Obj, by_uid: Mapping[str, Obj], own: Mapping[str, Obj],
              ctx: GangContext) -> list[Step]:
    steps: list[Step] = []
    for uid in plan.move_in:
        wl = own[uid]
        steps.append((p.name(by_uid[uid]), DeleteWorkload(
            p.name(wl), p.uid(wl), GANG_MOVED_IN,
            f"pod {p.name(by_uid[uid])} fills a vacancy in the gang's base {p.name(base)}")))
    for uid in plan.release:
        pod = by_uid[uid]
        steps += [(p.name(pod), x) for x in placement.lift(pod, base, ctx.flavors, gb.group_of(pod))]
    # Extras waiting at the gate, and base pods moving out (minReplicas lowered),
    # get a Workload of their own; an extra past the gate has one already.
    waiting = [u for u in plan.extras if u not in own and p.is_gated(by_uid[u])]
    for uid in [*waiting, *(u for u in plan.move_out if u not in own)]:
        pod = by_uid[uid]
        priority = _priority(pod, ctx)
        if isinstance(priority, Warn):
            steps.append((p.name(pod), priority))
            continue
        steps.append((p.name(pod), CreateWorkload(w.build_workload(pod, priority, ctx.version),
                                                  role_of(pod) or c.ROLE_WORKER)))
    if plan.reclaim:
        steps.append((None, SetReclaimable(p.name(base), dict(plan.reclaim))))
    if ctx.pods_ready:
        standing = [by_uid[u] for u in plan.standing]
        steps += [(None, x) for x in _base_readiness(base, standing)]
    return steps


def _base_readiness(base: Obj, standing: Sequence[Obj]) -> list[Action]:
    """PodsReady on the base once every base pod is Ready, as for a pod's own Workload."""
    ready = bool(standing) and all(p.is_ready(x) for x in standing)
    current = w.condition(base, w.PODS_READY)
    if ready and (current is None or current.get("status") != "True"):
        return [SetPodsReady(p.name(base), True, w.READY_STARTED, w.READY_MESSAGE)]
    if not ready and current is not None and current.get("status") == "True":
        return [SetPodsReady(p.name(base), False, w.READY_WAIT_FOR_RECOVERY,
                             w.RECOVERY_MESSAGE)]
    return []


def describe(pod: Obj, plan: g.Plan, own: bool) -> str:
    """For explain: the pod's place in its gang and what the gang waits for."""
    cluster = labels(pod).get(c.GANG_LABEL)
    uid = p.uid(pod)
    if own or uid in plan.extras:
        where = "an extra (a Workload of its own, admitted only after the base)"
    else:
        where = f"in the base (podSet {gb.group_of(pod)})"
    waiting = f"; the gang waits: {plan.waiting}" if plan.waiting else ""
    return f"gang {cluster}: {where}{waiting}"
