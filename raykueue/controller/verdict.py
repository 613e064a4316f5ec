"""One verdict on a pod: what stands between it and running, from `decide` itself.

`raykueue explain` prints it; the stuck-gate report exports its reason and
sends its sentence in an Event. Both take it from `decide` on the same
gathered facts (`facts.gather`), so neither can say something the controller
would not do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from raykueue.controller import actions as a
from raykueue.controller import decide as d
from raykueue.controller import pods as p
from raykueue.controller import workload as w
from raykueue.controller.current import current_workload
from raykueue.controller.facts import Facts
from raykueue.core.objects import Obj

# Why a gated pod waits, as the stuck-gate gauge labels it.
# Its own Workload exists: Kueue has not admitted it (or the gate is about to go).
WAITING_FOR_QUOTA: Final = "waiting_for_quota"
# A worker whose cluster's head is not admitted yet (head-first): no Workload by design.
WAITING_FOR_HEAD: Final = "waiting_for_head"
# No Workload of its own and nothing in the design that explains it: a missing
# queue label or WorkloadPriorityClass, a conflict with Kueue, or Workload
# creation failing.
NO_WORKLOAD: Final = "no_workload"
REASONS: Final = (WAITING_FOR_QUOTA, WAITING_FOR_HEAD, NO_WORKLOAD)


@dataclass(frozen=True, slots=True)
class Verdict:
    text: str  # one sentence
    reason: str  # one of REASONS (meaningful while the pod is gated)
    action: a.Action | None  # what `decide` would do that the sentence rests on


def verdict(facts: Facts) -> Verdict:
    """The verdict on a pod that is there (`facts.pod` is not None)."""
    pod = facts.pod
    assert pod is not None, "a verdict is on a pod"
    current = current_workload(pod, facts.workloads)
    actions = _for_the_pod(facts, current)
    action, text = _sentence(pod, actions)
    return Verdict(text, _reason(current, actions), action)


def reason(facts: Facts) -> str:
    """`verdict(facts).reason`, without deciding when the pod's own Workload
    settles it (most gated pods, read every few seconds by the report)."""
    assert facts.pod is not None, "a verdict is on a pod"
    current = current_workload(facts.pod, facts.workloads)
    if _live(current):
        return WAITING_FOR_QUOTA
    return _reason(current, _for_the_pod(facts, current))


def _for_the_pod(facts: Facts, current: Obj | None) -> list[a.Action]:
    # Finishing a duplicate or a namesake's Workload is housekeeping, not the
    # pod's state: the verdict reads what decide does for the pod itself.
    assert facts.pod is not None
    return [x for x in d.decide(facts.pod, facts.workloads, facts.ctx)
            if not (isinstance(x, a.FinishWorkload | a.DeleteWorkload)
                    and (current is None or x.workload != p.name(current)))]


def _live(current: Obj | None) -> bool:
    return current is not None and not w.is_finished(current) and not p.is_deleting(current)


def _reason(current: Obj | None, actions: list[a.Action]) -> str:
    # decide waits for the head only for a pod without a Workload of its own,
    # so the order of these two tests does not matter (`reason` relies on it).
    if _live(current):
        return WAITING_FOR_QUOTA
    if any(isinstance(x, a.Wait) and x.kind == a.WAIT_FOR_HEAD for x in actions):
        return WAITING_FOR_HEAD
    return NO_WORKLOAD


def _sentence(pod: Obj, actions: list[a.Action]) -> tuple[a.Action | None, str]:
    for action in actions:
        if isinstance(action, a.ReportConflict | a.Warn):
            return action, action.message
    for action in actions:
        if isinstance(action, a.Wait):
            return action, f"waiting: {action.reason}"
        if isinstance(action, a.CreateWorkload):
            return action, ("no Workload yet: raykueue's controller has not created it; is the "
                            "controller running (one replica holds the lease)?")
        if isinstance(action, a.LiftGate):
            return action, ("admitted: the controller lifts the gate next (if this persists, is "
                            "the controller running?)")
        if isinstance(action, a.EvictPod):
            return action, f"evicted by Kueue ({action.reason}): the pod is about to be deleted"
        if isinstance(action, a.FinishWorkload):
            return action, f"finishing its Workload: {action.message}"
        if isinstance(action, a.DeleteWorkload):
            return action, f"deleting its Workload: {action.message}"
    if p.is_gated(pod):
        return None, "gated, nothing pending on raykueue's side"
    return None, "not gated: the scheduler places it (or already did)"
