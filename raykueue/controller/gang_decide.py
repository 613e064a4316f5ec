"""What to do for one gang cluster, given its pods and Workloads: no I/O.

`controller.gang.plan` is the rule; this turns it into actions (each for a
pod, or for the base itself) and builds the base Workload. The per-pod
`decide` keeps doing everything for an extra that has a Workload of its own
(gate lift, readiness, release); it only never creates one for a gang pod.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from raykueue.controller import gang as g
from raykueue.controller import placement
from raykueue.controller import pods as p
from raykueue.controller import workload as w
from raykueue.controller import workload_status as ws
from raykueue.controller.actions import (
    FINISHED_EVICTED,
    GANG_MOVED_IN,
    GANG_REQUEUED,
    WARN_PRIORITY_CLASS,
    Action,
    CreateWorkload,
    DeleteWorkload,
    EvictPod,
    SetPodsReady,
    SetReclaimable,
    Wait,
    Warn,
)
from raykueue.core import contract as c
from raykueue.core.objects import Obj, annotations, labels, metadata
from raykueue.core.pods import role_of

# A gang's pass runs under this key name: no pod can be called so (a pod name
# is a DNS-1123 subdomain, without ':').
KEY_PREFIX: Final = g.KEY_PREFIX
ROLE: Final = "gang"

Step = tuple[str | None, Action]  # (pod name, or None for the base), action


def key_name(cluster: str) -> str:
    return KEY_PREFIX + cluster


def cluster_of_key(name: str) -> str | None:
    return name[len(KEY_PREFIX):] if name.startswith(KEY_PREFIX) else None


def is_gang_pod(pod: Obj) -> bool:
    return bool(labels(pod).get(c.GANG_LABEL))


def is_base(wl: Obj) -> bool:
    return bool(labels(wl).get(c.GANG_LABEL)) and w.owner_pod(wl) is None


def base_name(cluster: str, raycluster_uid: str) -> str:
    return f"{cluster[:200].rstrip('-.')}-gang-{w.short_hash(raycluster_uid)}"


def raycluster_ref(pod: Obj) -> Mapping[str, Any] | None:
    for ref in metadata(pod).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("kind") == c.RAYCLUSTER_KIND and ref.get("uid"):
            return ref
    return None


def group_of(pod: Obj) -> str:
    if role_of(pod) == c.ROLE_HEAD:
        return g.HEAD_GROUP
    return str(labels(pod).get(c.GROUP_LABEL) or "")


def mins_of(pod: Obj) -> dict[str, int] | None:
    """The base counts the webhook stamped on the pod, None when unreadable."""
    try:
        value = json.loads(annotations(pod).get(c.GANG_MIN_ANNOTATION) or "")
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    return g.minimum({str(k): v for k, v in value.items() if isinstance(v, int)})


@dataclass(frozen=True, slots=True)
class GangContext:
    version: str = w.V1BETA2
    pods_ready: bool = True
    flavors: Mapping[str, Obj] = field(default_factory=dict)
    priority_values: Mapping[str, int] = field(default_factory=dict)
    # The RayCluster itself is gone or going (asked only when the head is gone): its
    # pods go with it, so there is nothing to requeue, only the base to delete.
    cluster_gone: bool = False


def base_state(base: Obj | None) -> g.Base:
    if base is None:
        return g.Base()
    reclaimed = ws.reclaimable(base)
    admitted = w.is_admitted(base) and not w.is_evicted(base) and not w.is_finished(base)
    return g.Base(exists=True, admitted=admitted, reclaimed=reclaimed)


def members(pods: Sequence[Obj], own: Mapping[str, Obj]) -> list[g.Member]:
    """Live pods (not being deleted, not ended) as the rule sees them."""
    return [g.Member(p.uid(x), group_of(x), str(metadata(x).get("creationTimestamp") or ""),
                     own_workload=p.uid(x) in own)
            for x in pods if not (p.is_deleting(x) or p.is_terminal(x))]


def build_base(name: str, head: Obj, oldest: Mapping[str, Obj], mins: Mapping[str, int],
               priority: w.Priority | None, version: str) -> dict[str, Any]:
    """One podSet per group, from the group's oldest pod: Kueue admits it all or nothing."""
    body = w.build_workload(head, priority, version)
    body["metadata"]["name"] = name
    cluster = str(labels(head).get(c.CLUSTER_LABEL) or "")
    body["metadata"]["labels"] = {c.CLUSTER_LABEL: cluster, c.GANG_LABEL: cluster,
                                  c.MANAGED_BY_LABEL: c.MANAGED_BY_VALUE}
    ref = raycluster_ref(head) or {}
    # Not a controller reference: Kueue's RayCluster reconciler must not take it as its own.
    body["metadata"]["ownerReferences"] = [{
        "apiVersion": ref.get("apiVersion"), "kind": c.RAYCLUSTER_KIND, "name": ref.get("name"),
        "uid": ref.get("uid"), "controller": False, "blockOwnerDeletion": False}]
    body["spec"]["podSets"] = [
        {"name": group, "count": n, "template": w.pod_set_template(oldest[group])}
        for group, n in sorted(mins.items(), key=lambda x: (x[0] != g.HEAD_GROUP, x[0]))]
    return body


def _priority(pod: Obj, ctx: GangContext) -> w.Priority | Warn | None:
    class_name = labels(pod).get(c.PRIORITY_CLASS_LABEL)
    if not class_name:
        return None
    value = ctx.priority_values.get(class_name)
    if value is None:
        return Warn(WARN_PRIORITY_CLASS, f"WorkloadPriorityClass {class_name!r} of pod "
                                         f"{p.name(pod)} does not exist; create it and it queues")
    return w.Priority(class_name, value)


def _requeue(base: Obj, base_pods: Sequence[Obj], reason: str, message: str) -> list[Step]:
    """The base goes whole: its pods are evicted (KubeRay recreates them gated)."""
    steps: list[Step] = [(p.name(x), EvictPod(p.name(base), reason, message,
                                              role_of(x) == c.ROLE_HEAD))
                         for x in base_pods if not p.is_deleting(x)]
    if not w.is_deleting(base):
        steps.append((None, DeleteWorkload(p.name(base), p.uid(base), GANG_REQUEUED, message)))
    return steps


def decide_gang(pods: Sequence[Obj], own: Mapping[str, Obj], base: Obj | None,
                ctx: GangContext) -> tuple[list[Step], g.Plan]:
    """`own`: pod uid -> its own (extra) Workload, ours and not being deleted."""
    by_uid = {p.uid(x): x for x in pods}
    live = [x for x in pods if not (p.is_deleting(x) or p.is_terminal(x))]
    heads = sorted((x for x in live if role_of(x) == c.ROLE_HEAD),
                   key=lambda x: str(metadata(x).get("creationTimestamp")))
    mins = next((m for m in (mins_of(x) for x in heads + live) if m is not None), None)
    if mins is None:
        return [(None, Wait("no gang pod carries its base counts"))], g.Plan()
    if base is not None and w.is_deleting(base):
        return [(None, Wait(f"base Workload {p.name(base)} is being deleted"))], g.Plan()
    state = base_state(base)
    plan = g.plan(members(pods, own), mins, state)
    in_base = [x for x in pods if p.uid(x) not in own]

    if base is not None and w.is_evicted(base):
        cond = w.condition(base, w.EVICTED) or {}
        return _requeue(base, in_base, str(cond.get("reason") or FINISHED_EVICTED),
                        str(cond.get("message") or "evicted by Kueue")), plan
    if plan.requeue and base is not None and ctx.cluster_gone:
        return [(None, DeleteWorkload(p.name(base), p.uid(base), GANG_REQUEUED,
                                      "the RayCluster is gone: its pods go with it"))], plan
    if plan.requeue and base is not None:
        return _requeue(base, in_base, GANG_REQUEUED, "the gang's head is gone"), plan

    steps: list[Step] = []
    if plan.create_base:
        head = heads[0]
        priority = _priority(head, ctx)
        if isinstance(priority, Warn):
            return [(p.name(head), priority)], plan
        ref = raycluster_ref(head)
        if ref is None:
            return [(None, Wait("the head pod has no RayCluster owner"))], plan
        oldest: dict[str, Obj] = {}
        for x in sorted(live, key=lambda x: (str(metadata(x).get("creationTimestamp")), p.uid(x))):
            oldest.setdefault(group_of(x), x)
        name = base_name(str(labels(head).get(c.CLUSTER_LABEL)), str(ref["uid"]))
        steps.append((None, CreateWorkload(build_base(name, head, oldest, mins, priority,
                                                      ctx.version), ROLE)))
        return steps, plan
    if base is None or not state.admitted:
        return [(None, Wait(plan.waiting))], plan

    for uid in plan.move_in:
        wl = own[uid]
        steps.append((p.name(by_uid[uid]), DeleteWorkload(
            p.name(wl), p.uid(wl), GANG_MOVED_IN,
            f"pod {p.name(by_uid[uid])} fills a vacancy in the gang's base {p.name(base)}")))
    for uid in plan.release:
        pod = by_uid[uid]
        if p.is_gated(pod):
            steps += [(p.name(pod), x)
                      for x in placement.lift(pod, base, ctx.flavors, group_of(pod))]
    for uid in plan.extras:
        pod = by_uid[uid]
        if uid in own or not p.is_gated(pod):
            continue
        priority = _priority(pod, ctx)
        if isinstance(priority, Warn):
            steps.append((p.name(pod), priority))
            continue
        steps.append((p.name(pod), CreateWorkload(w.build_workload(pod, priority, ctx.version),
                                                  role_of(pod) or c.ROLE_WORKER)))
    if plan.reclaim:
        steps.append((None, SetReclaimable(p.name(base), dict(plan.reclaim))))
    if ctx.pods_ready:
        released = [by_uid[u] for u in plan.release]
        steps += [(None, x) for x in _base_readiness(base, released)]
    return steps, plan


def _base_readiness(base: Obj, released: Sequence[Obj]) -> list[Action]:
    """PodsReady on the base once every base pod is Ready, as for a pod's own Workload."""
    ready = bool(released) and all(p.is_ready(x) and not p.is_gated(x) for x in released)
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
        where = f"in the base (podSet {group_of(pod)})"
    waiting = f"; the gang waits: {plan.waiting}" if plan.waiting else ""
    return f"gang {cluster}: {where}{waiting}"
