"""From a parsed review to a verdict and the facts worth logging about it.

The entry points are pure: the caller supplies the owner context it read
from caches. Dry-run requests go through the same code, which is why nothing
here has a side effect. A pod's decision that hinged on an owner the caches
lack comes back with a `follow_up`: the caller runs it off the event loop (it
reads the owners from the API server) and answers with its Outcome instead.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import partial

from raykueue.core.objects import Obj, display_name
from raykueue.core.podrole import role_of
from raykueue.core.priority import PriorityPolicy
from raykueue.core.rayobjects import RAY_OBJECT_KINDS, is_opted_in
from raykueue.core.refusal import Refusal
from raykueue.webhooks.classify import Manage, OwnerUnread, PodContext, Skip, classify
from raykueue.webhooks.mutate import gate_patch
from raykueue.webhooks.rayobjects import RayObjectPolicy, Stage, first, last
from raykueue.webhooks.rayrules import NamespaceFacts
from raykueue.webhooks.review import Review, ReviewResponse
from raykueue.webhooks.validate import judge_update


@dataclass(frozen=True, slots=True)
class Outcome:
    """A verdict plus what the decision log line and metrics report."""

    verdict: ReviewResponse
    decision: str  # gated | skipped | denied | allowed
    role: str = ""
    queue: str = ""
    priority: str = ""
    reason: str = ""
    # The decision again with the owners the caches lack read live (blocking I/O:
    # never on the event loop); its Outcome replaces this one, which is the answer
    # without the read.
    follow_up: Callable[[], Outcome] | None = None


def refused(refusal: Refusal, role: str = "", follow_up: Callable[[], Outcome] | None = None) -> Outcome:
    """Every refusal, answered one way: the message to the user and to the log."""
    return Outcome(ReviewResponse(False, message=refusal.message), "denied", role=role,
                   reason=refusal.message, follow_up=follow_up)


def admit_create(review: Review, ctx: PodContext, policy: PriorityPolicy) -> Outcome:
    if review.operation != "CREATE":
        return Outcome(ReviewResponse(True), "skipped", reason=f"{review.operation} is not handled")
    pod = review.object
    decision = classify(pod, ctx, policy)
    role = role_of(pod) or ""
    match decision:
        case Skip(reason=reason, warning=warning):
            warnings = (warning,) if warning else ()
            return Outcome(ReviewResponse(True, warnings=warnings), "skipped", role=role, reason=reason)
        case OwnerUnread() if ctx.live is not None:
            return refused(decision, role, partial(_with_live_owners, review, ctx.live, policy))
        case Refusal():
            return refused(decision, role)
        case Manage():
            patch = gate_patch(pod, decision)
            return Outcome(
                ReviewResponse(True, patch=patch or None, warnings=decision.warnings),
                "gated",
                role=role,
                queue=decision.queue,
                priority=decision.priority_class,
                reason=f"queue from {decision.queue_source}, priority from {decision.priority_source}",
            )
    raise AssertionError(f"unhandled decision {decision!r}")  # pragma: no cover


def _with_live_owners(review: Review, live: Callable[[Obj, str], PodContext],
                      policy: PriorityPolicy) -> Outcome:
    """The follow-up: decided again on the owners read live (its context has no `live`,
    so this answer is final)."""
    return admit_create(review, live(review.object, review.namespace), policy)


def admit_update(review: Review, controllers: Collection[str]) -> Outcome:
    role = role_of(review.object) or ""
    if review.operation != "UPDATE" or review.old_object is None:
        return Outcome(ReviewResponse(True), "allowed", role=role, reason=f"{review.operation} not judged")
    judgement = judge_update(review.old_object, review.object, review.username, controllers)
    if isinstance(judgement, Refusal):
        return refused(judgement, role)
    return Outcome(ReviewResponse(True), "allowed", role=role, reason=judgement.reason)


def admit_ray_object(review: Review, stage: Stage, facts: NamespaceFacts, policy: RayObjectPolicy) -> Outcome:
    """A RayCluster/RayJob/RayService passing before (FIRST) or after (LAST) Kueue's webhooks."""
    obj = review.object
    kind = obj.get("kind")
    if kind not in RAY_OBJECT_KINDS or review.operation not in ("CREATE", "UPDATE"):
        return Outcome(ReviewResponse(True), "skipped", reason=f"{kind} {review.operation} is not handled")
    if stage is Stage.FIRST:
        answer = first(obj, review.old_object, review.operation, facts, policy)
    else:
        answer = last(obj, review.operation, facts)
    if isinstance(answer, Refusal):
        return refused(answer)
    if not is_opted_in(obj) and not answer.patch:
        return Outcome(ReviewResponse(True), "skipped", reason="not opted in")
    decision = "hidden" if stage is Stage.FIRST else "restored"
    what = answer.what if answer.patch else f"{answer.what}; nothing to change"
    return Outcome(ReviewResponse(True, patch=answer.patch or None), decision,
                   reason=f"{kind} {display_name(obj)}: {what}")
