"""What to do for one pod, given every fact about it: no I/O.

`decide(pod, workloads, ctx)` looks at a pod (None once it is gone), every
Workload that names it (or a pod of the same name) as owner, and the facts the
`controller.reads.Reader` gathered (`Context`), and returns the actions
(`controller.actions`) to apply, in order. Applying them and then deciding
again on the new state yields nothing new: every rule is a test of the current
state, never of a remembered event, which is what makes a restarted or newly
elected controller safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from raykueue.controller import placement, removal
from raykueue.controller import pods as p
from raykueue.controller import workload as w
from raykueue.controller import workload_match as wm
from raykueue.controller.actions import (
    CONFLICT_FORGED_WORKLOAD,
    CONFLICT_KUEUE_POD,
    CONFLICT_KUEUE_WORKLOAD,
    FINISHED_DUPLICATE,
    FINISHED_EVICTED,
    FINISHED_OWNER_NOT_FOUND,
    OUTSIDE_QUOTA,
    WAIT_FOR_HEAD,
    WARN_FINISHED_WHILE_GATED,
    WARN_LABEL_REMOVED,
    WARN_NO_QUEUE,
    WARN_PRIORITY_CLASS,
    WARN_UNGATED_NOT_ADMITTED,
    Action,
    CreateWorkload,
    EvictPod,
    ReportConflict,
    SetPodsReady,
    Wait,
    Warn,
)
from raykueue.controller.current import claims
from raykueue.controller.gang.member import cluster_decides
from raykueue.controller.release import COLLECTOR_GRACE_SECONDS, finish, release, release_gone
from raykueue.core import contract as c
from raykueue.core.objects import Obj, gate_names, labels
from raykueue.core.podrole import kueue_claims, role_of
from raykueue.core.priority import Missing, workload_priority


@dataclass(frozen=True, slots=True)
class Context:
    """Every fact about the pod besides itself and its Workloads, as the
    `Reader` gathered them."""

    version: str = w.V1BETA2
    head_first: bool = True
    pods_ready: bool = True
    # Whether the pod's cluster has a head whose Workload is admitted (or that
    # already runs); only consulted for workers.
    head_admitted: bool = False
    flavors: Mapping[str, Obj] = field(default_factory=dict)
    priority_values: Mapping[str, int] = field(default_factory=dict)
    # Only while the pod is missing from the cache: its last state, if the
    # watch told us how it went ...
    departed: Obj | None = None
    # ... and, when that does not explain it (`needs_live_pod`), the uid of
    # the pod of that name the API server still has (None: none).
    live_pod_uid: str | None = None
    # When the watch said the pod went (the clock of `now`; None: unknown), and how
    # long its Workload is left to the garbage collector from then (release_gone).
    departed_at: float | None = field(default=None, compare=False)
    collector_grace: float = COLLECTOR_GRACE_SECONDS
    # The time of the pass (None: unknown, as for `explain`, and then no pod is
    # ever proposed for removal as outside quota), the grace before a pod past the
    # gate whose Workload is not admitted counts as outside quota, and, for such a
    # pod, why it waits for other candidates of its cluster (removal.ahead_of).
    now: float | None = field(default=None, compare=False)  # the moment, not a fact
    outside_quota_grace: float = 120.0
    outside_quota_ahead: str | None = None


# How soon a pod outside quota that waits for others of its cluster (workers before
# heads, lower priorities first) is looked at again.
OTHERS_RECHECK_SECONDS = 2.0


# --- the decision ---------------------------------------------------------------


def decide(pod: Obj | None, workloads: Sequence[Obj], ctx: Context) -> list[Action]:
    found = claims(pod, workloads)
    actions: list[Action] = []
    for wl in found.stale:
        # Ours, but for a pod that no longer exists (a namesake may): the
        # pod vanished while we were down, or before we finished it.
        actions += _vanished(wl, ctx) if pod is None else _owner_gone(wl)
    if pod is None:
        return actions

    claim = kueue_claims(pod)
    if claim is not None:
        return [*actions, ReportConflict(
            CONFLICT_KUEUE_POD,
            f"pod {p.name(pod)} {claim}: Kueue's pod integration manages it, so raykueue "
            "leaves it alone; disable one of the two for this pod")]
    if found.foreign:
        names = ", ".join(sorted(p.name(x) for x in found.foreign))
        return [*actions, ReportConflict(
            CONFLICT_KUEUE_WORKLOAD,
            f"pod {p.name(pod)} is owned by Workload {names} not created by raykueue "
            f"(no {c.MANAGED_BY_LABEL}={c.MANAGED_BY_VALUE} label); its quota would be "
            "counted twice, so raykueue leaves the pod alone")]

    current = found.current
    for dup in found.duplicates:
        actions += finish(dup, FINISHED_DUPLICATE,
                          f"a second Workload for pod {p.name(pod)}; {p.name(current)} is kept"
                          if current is not None else "duplicate Workload")

    if p.is_deleting(pod) or p.is_terminal(pod):
        if current is not None:
            actions += release(pod, current)
        return actions

    # A gang pod that leans on its cluster's base: that pass decides (gang.member).
    deferred = cluster_decides(pod, current)
    if deferred is not None:
        return actions + deferred
    if current is None:
        return actions + _without_workload(pod, ctx)
    if p.is_deleting(current):
        # Its name is the one a new Workload would take: wait until it is gone.
        return [*actions, Wait(f"Workload {p.name(current)} is being deleted")]
    return actions + _with_workload(pod, current, ctx)


def _owner_gone(wl: Obj) -> list[Action]:
    return finish(wl, FINISHED_OWNER_NOT_FOUND,
                  f"pod {_owner_name(wl)} ({w.pod_uid_of(wl)}) no longer exists")


def _vanished(wl: Obj, ctx: Context) -> list[Action]:
    """The finish of a Workload whose pod left the cache, with its real reason.

    The pod's last state, when the watch delivered it, says whether it
    succeeded, failed or was deleted. A pod that merely lost our label also
    leaves the cache (without a deletionTimestamp): while the API server still
    has it, finishing its Workload would release quota for a pod that runs.
    """
    finish = _owner_gone(wl)
    if not finish:
        return []
    if ctx.departed is not None and departure_explains(ctx.departed, wl):
        waited = (None if ctx.now is None or ctx.departed_at is None
                  else ctx.now - ctx.departed_at)
        return release_gone(ctx.departed, wl, waited, ctx.collector_grace)
    uid = w.pod_uid_of(wl)
    if uid and ctx.live_pod_uid == uid:
        return [Warn(WARN_LABEL_REMOVED,
                     f"pod exists but is no longer labelled {c.MANAGED_BY_LABEL}="
                     f"{c.MANAGED_BY_VALUE}; leaving its Workload {p.name(wl)} alone")]
    return finish


def departure_explains(departed: Obj, wl: Obj) -> bool:
    """Whether the pod's last state says it went (deleted or ended), rather
    than merely stopped matching our label selector."""
    return (w.pod_uid_of(wl) == p.uid(departed)
            and (p.is_deleting(departed) or p.is_terminal(departed)))


def needs_live_pod(workloads: Iterable[Obj], departed: Obj | None) -> bool:
    """Whether `decide`, for a pod missing from the cache, needs to know if
    the API server still has it: some Workload of ours would be finished and
    the pod's last state does not say why it went."""
    return any(w.is_ours(wl) and _owner_gone(wl) and w.pod_uid_of(wl)
               and not (departed is not None and departure_explains(departed, wl))
               for wl in workloads)


def _without_workload(pod: Obj, ctx: Context) -> list[Action]:
    if not p.is_gated(pod):
        return _running_without_workload(pod, ctx)
    role = role_of(pod) or c.ROLE_WORKER
    if role == c.ROLE_WORKER and ctx.head_first and not ctx.head_admitted:
        return [Wait(f"head of Ray cluster {p.cluster(pod) or '?'} not admitted yet", WAIT_FOR_HEAD)]
    if not labels(pod).get(c.QUEUE_LABEL):
        return [Warn(WARN_NO_QUEUE,
                     f"pod {p.name(pod)} has no {c.QUEUE_LABEL} label, so Kueue would never "
                     "admit its Workload; recreate it through the raykueue webhook"),
                Wait("no queue")]
    found = workload_priority(labels(pod).get(c.PRIORITY_CLASS_LABEL), ctx.priority_values, p.name(pod))
    if isinstance(found, Missing):
        return [Warn(WARN_PRIORITY_CLASS, found.message), Wait(found.waiting)]
    return [CreateWorkload(w.build_workload(pod, found and w.Priority(*found), ctx.version), role)]


def _running_without_workload(pod: Obj, ctx: Context) -> list[Action]:
    """A pod of ours past every gate with no Workload: adopted while it ran (created
    before raykueue was installed, or while its webhooks were away:
    controller/adopt.py), or admitted and its Workload since deleted. Either way
    it gets a Workload of its own, never a delete: if Kueue admits it the pod
    keeps running untouched (and is counted again); whether a pod Kueue does not
    admit must go is the removal rule's to prove, not a guess made here.

    Head first: a worker waits until its cluster's head is admitted. The
    Workload is built from the pod as the API server has it (the cache drops a
    running pod's spec; `needs_live_pod_spec` has the Reader read it live).
    """
    role = role_of(pod)
    if role not in c.MANAGED_ROLES:
        return []  # not a Ray head or worker: never raykueue's
    if isinstance(pod, p.SlimPod) and pod.spec_json is None:
        # A sweep over the cache (the stuck report, explain): the loop's pass
        # reads the pod live and makes the Workload.
        return [Wait("its Workload is made from a live read of the running pod")]
    if role == c.ROLE_WORKER and ctx.head_first and not ctx.head_admitted:
        return [Wait(f"running worker: head of Ray cluster {p.cluster(pod) or '?'} not admitted "
                     "yet", WAIT_FOR_HEAD)]
    queue = w.pod_queue(pod)
    if not queue:
        return [Warn(WARN_NO_QUEUE,
                     f"running pod {p.name(pod)} has no queue ({c.QUEUE_LABEL} label or "
                     f"{c.QUEUE_ANNOTATION} annotation), so no Workload can count it"),
                Wait("no queue")]
    found = workload_priority(w.pod_priority_class(pod), ctx.priority_values, p.name(pod))
    if isinstance(found, Missing):
        return [Warn(WARN_PRIORITY_CLASS, found.message), Wait(found.waiting)]
    return [CreateWorkload(w.build_workload(pod, found and w.Priority(*found), ctx.version), role)]


def needs_live_pod_spec(pod: Obj | None, workloads: Sequence[Obj]) -> bool:
    """Whether `decide` may build a Workload for a running pod whose spec the cache
    dropped: ours, past the gate, alive, with no Workload. The Reader then reads
    the pod live, which is also the evidence the Workload is made on."""
    if pod is None or p.is_gated(pod) or p.is_deleting(pod) or p.is_terminal(pod):
        return False
    if isinstance(pod, p.SlimPod) and pod.spec_json is not None:
        return False
    if role_of(pod) not in c.MANAGED_ROLES or kueue_claims(pod) is not None:
        return False
    found = claims(pod, workloads)
    return found.current is None and not found.foreign and cluster_decides(pod, None) is None


def _with_workload(pod: Obj, wl: Obj, ctx: Context) -> list[Action]:
    name = p.name(wl)
    if p.is_gated(pod):
        # Its status may open the gate: it must be the Workload we would make.
        why = wm.mismatch(wl, pod)
        if why is not None:
            return [ReportConflict(
                CONFLICT_FORGED_WORKLOAD,
                f"Workload {name} claims pod {p.name(pod)} but is not the one raykueue makes "
                f"for it ({why}); the gate stays until that Workload is deleted",
                workload=name)]
    if w.is_finished(wl):
        if p.is_gated(pod):
            return [Warn(WARN_FINISHED_WHILE_GATED,
                         f"Workload {name} of pod {p.name(pod)} is Finished but the pod is still "
                         "gated; delete the pod and let KubeRay recreate it")]
        return []

    if w.is_evicted(wl):
        cond = w.condition(wl, w.EVICTED) or {}
        reason = str(cond.get("reason") or "Evicted")
        message = str(cond.get("message") or "evicted by Kueue")
        head = role_of(pod) == c.ROLE_HEAD
        return [
            EvictPod(name, reason, message, head),
            *finish(wl, FINISHED_EVICTED, f"pod {p.name(pod)} deleted after eviction: "
                                          f"{reason}: {message}"),
        ]

    if not w.is_admitted(wl):
        if not p.is_gated(pod):
            return _outside_quota(pod, wl, ctx)
        return [Wait(_pending_reason(wl))]

    if p.is_gated(pod):
        return placement.lift(pod, wl, ctx.flavors)
    return _readiness(pod, wl) if ctx.pods_ready else []


def _outside_quota(pod: Obj, wl: Obj, ctx: Context) -> list[Action]:
    """A pod past the gate whose own Workload is not admitted runs outside Kueue's
    quota: reported at once, proposed for removal once the grace is over (workers
    first, the lowest priority first; `removal`). The handler confirms it live."""
    name = p.name(wl)
    grace = ctx.outside_quota_grace
    warn = Warn(WARN_UNGATED_NOT_ADMITTED,
                f"pod {p.name(pod)} is not gated but its Workload {name} is not admitted; it "
                f"runs outside Kueue's quota and is removed once that lasts {grace:.0f}s")
    left = removal.outside_quota_left(pod, wl, ctx.now, grace)
    if left is None:
        return [warn]
    if left > 0:
        return [warn, Wait(f"outside quota: removed in {left:.0f}s unless admitted", after=left)]
    if ctx.outside_quota_ahead:
        # No event of this pod says when the others are gone (a head hears nothing of
        # its workers' deletion): look again shortly.
        return [warn, Wait(f"outside quota, waiting: {ctx.outside_quota_ahead}",
                           after=OTHERS_RECHECK_SECONDS)]
    head = role_of(pod) == c.ROLE_HEAD
    return [EvictPod(name, OUTSIDE_QUOTA,
                     f"pod {p.name(pod)} ran past the gate while its Workload {name} stayed not "
                     f"admitted for more than {grace:.0f}s: it is outside Kueue's quota; KubeRay "
                     "recreates it gated and it queues", head)]


def _readiness(pod: Obj, wl: Obj) -> list[Action]:
    """PodsReady as Kueue's job framework writes it (generatePodsReadyCondition).

    An absent condition is not written as False: Kueue's WaitForPodsReady
    treats absent like False/WaitForStart, and skipping it saves a write per pod.
    """
    current = w.condition(wl, w.PODS_READY)
    ready_now = p.is_ready(pod)
    if ready_now:
        if current is not None and current.get("status") == "True":
            return []
        recovering = current is not None and current.get("reason") in (
            w.READY_WAIT_FOR_RECOVERY, w.READY_RECOVERED)
        reason = w.READY_RECOVERED if recovering else w.READY_STARTED
        return [SetPodsReady(p.name(wl), True, reason, w.READY_MESSAGE)]
    if current is not None and current.get("status") == "True":
        return [SetPodsReady(p.name(wl), False, w.READY_WAIT_FOR_RECOVERY, w.RECOVERY_MESSAGE)]
    return []


# --- head first ---------------------------------------------------------------------


def head_admitted(heads: Iterable[tuple[Obj, Obj | None]]) -> bool:
    """Whether a cluster's head can run: given each head pod with its Workload.

    A head counts when its Workload is admitted (and not evicted or finished),
    or, with no Workload of ours, when it is past every scheduling gate (ours
    lifted, or a head raykueue never gated whose Kueue gate, if any, is gone)
    and neither being deleted nor ended.
    """
    for pod, wl in heads:
        if p.is_deleting(pod) or p.is_terminal(pod):
            continue
        if wl is not None and w.pod_uid_of(wl) == p.uid(pod):
            if (w.is_admitted(wl) and not w.is_evicted(wl) and not w.is_finished(wl)
                    and wm.mismatch(wl, pod) is None):
                return True
            continue
        if not gate_names(pod):
            return True
    return False


# --- helpers ------------------------------------------------------------------------


def _pending_reason(wl: Obj) -> str:
    for type_ in (w.QUOTA_RESERVED, w.ADMITTED):
        cond = w.condition(wl, type_)
        if cond is not None and cond.get("status") != "True" and cond.get("message"):
            return str(cond["message"])
    if w.is_quota_reserved(wl):
        return "quota reserved, admission checks pending"
    return "waiting for Kueue to admit the Workload"


def _owner_name(wl: Obj) -> str:
    owner = w.owner_pod(wl)
    return owner[0] if owner else "?"
