"""What raykueue does to a RayCluster, RayJob or RayService around Kueue's webhooks.

Kueue acts on a Ray object that carries the `kueue.x-k8s.io/queue-name` label:
its webhook suspends it and its reconciler admits the whole cluster as one
Workload. Its webhook also gives an unlabelled object the namespace's `default`
LocalQueue. For an opted-in object both would take the cluster away from
raykueue, so the object passes two of our webhooks around Kueue's (the API
server calls mutating configurations in name order):

- FIRST (configuration `aa-raykueue-first`, before Kueue's) decides the one
  opt-in rule and refuses what breaks it (docs/KUEUE.md, "One opt-in rule"); for
  an opted-in object it moves the queue label to our annotation
  `raykueue.io/queue-name`, which Kueue never reads, notes a suspend the user
  asked for, and, on a RayCluster, stamps every pod template with
  `raykueue.io/opted-in` (the pod webhook's scope) and raises the Ray
  autoscaler's allocate timeout. A RayJob's or RayService's cluster spec is left
  as written: KubeRay copies their annotations onto the RayCluster it makes, and
  that RayCluster passes here too. So a RayService's cluster hash never changes
  because of raykueue.
- LAST (in `zz-raykueue-mutating`, after Kueue's) takes back only what Kueue's
  defaulting added: its `default` queue label, the suspend it set because of a
  queue label, the MultiKueue `managedBy`. A queue label any other webhook added
  is moved to our annotation (refused when it names another queue than ours); a
  suspend set without a queue label is nobody's defaulting and is kept.

The rules the first stage applies are in webhooks/rayrules.py, the patches both
answer with in webhooks/raypatches.py, the shape of Ray objects and the opt-in
in core/rayobjects.py, the head-only priority rule in core/priority.py.

Both are pure functions of the object (and, on UPDATE, the old one), of facts the
edge read from caches, and of the policy; both are idempotent, so a reinvocation
(LAST runs IfNeeded, after a reinvoked Kueue webhook) or a repeated `kubectl apply`
changes nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from raykueue.core import contract as c
from raykueue.core import priority
from raykueue.core.jsonpointer import pointer
from raykueue.core.objects import Obj, annotations, display_name, labels, metadata
from raykueue.core.rayobjects import (
    MANAGED_BY,
    SUSPEND,
    admitted_whole,
    get,
    handed_to_kueue,
    is_opted_in,
    is_suspended,
    opt_in_value,
)
from raykueue.webhooks.mutate import Patch, drop_entries
from raykueue.webhooks.raypatches import first_patch, handover_patch, move_queue, unstamp
from raykueue.webhooks.rayrules import (
    NamespaceFacts,
    Refusal,
    cannot_opt_in,
    introduced_template_opt_in,
    kueue_takes,
    opt_in_change,
    submitter_rule,
)


class Stage(Enum):
    FIRST = "first"
    LAST = "last"


@dataclass(frozen=True, slots=True)
class RayObjectPolicy:
    """Settings the Ray-object stages apply (app/settings.py)."""

    # Written into an opted-in RayCluster's autoscaler env; None or 0: off.
    allocate_timeout: int | None = None
    # Which classes a worker group may not name (the head-only rule).
    priority: priority.PriorityPolicy = field(default_factory=priority.PriorityPolicy)


@dataclass(frozen=True, slots=True)
class Changed:
    """An allowed object: the patch (maybe empty) and what was done, for the log."""

    patch: Patch = field(default_factory=list)
    what: str = ""


Answer = Changed | Refusal


def first(obj: Obj, old: Obj | None, operation: str, facts: NamespaceFacts,
          policy: RayObjectPolicy) -> Answer:
    """The first stage (before Kueue's webhooks); see the module docstring."""
    kind = str(obj.get("kind"))
    what = f"{kind} {display_name(obj)}"
    value = opt_in_value(obj)
    if value is not None and value not in c.STANDALONE_VALUES:
        return Refusal(f'annotation {c.STANDALONE_ANNOTATION}="{value}" on {what} is not valid: set it '
                       'to "true" to queue this Ray cluster in Kueue pod by pod, or "false" (or '
                       "nothing) to leave it to Kueue")
    updating = operation == "UPDATE" and old is not None
    if handed_to_kueue(old if updating else obj):
        # Kueue's since the hand-over (or, on CREATE, a RayCluster KubeRay made from a
        # RayJob/RayService that was handed over: it copies the annotations): nothing
        # of raykueue's goes back on, and its opt-in may go without a suspend, the
        # regime having changed already.
        return Changed(unstamp(obj), f"handed to Kueue ({c.HANDED_TO_KUEUE_ANNOTATION})")
    was = opt_in_value(old) if updating else None
    if updating and was != value:
        refusal = opt_in_change(obj, old or {}, was, value)
        if refusal is not None:
            return refusal
    introduced = introduced_template_opt_in(obj, old if updating else None)
    if introduced is not None:
        return Refusal(
            f"annotation {c.STANDALONE_ANNOTATION} on {introduced} of {what}: the opt-in is per "
            f"cluster and is read only from the {kind}'s own metadata.annotations. Remove it "
            f"from the pod template and set {c.STANDALONE_ANNOTATION}: \"true\" on the {kind} "
            "to queue the whole cluster pod by pod, or nothing to leave it to Kueue")
    if value != "true":
        # Not opted in (or the opt-in was just removed from a suspended cluster):
        # its stamps go with it, so its pods are Kueue's again.
        return Changed(unstamp(obj), "not opted in")
    newly = not updating or was != value
    if not newly:
        taken = kueue_takes(obj, old or {}, facts)
        if isinstance(taken, Refusal):
            return taken
        if taken is not None:
            return Changed(handover_patch(obj, facts, taken), f"handed to Kueue: {taken}")
    if not newly and admitted_whole(old):
        # Opted in before raykueue was installed, with Kueue's queue label, so Kueue
        # admits it whole: moving the label would be refused by Kueue's validating
        # webhook on a running object, and stamping it would count its pods twice.
        # Suspend it and set the opt-in again to hand it to raykueue.
        return Changed([], f"Kueue admits it whole ({c.QUEUE_LABEL} since before raykueue)")
    head_class = priority.head_class_on_a_worker(obj, old if updating else None, policy.priority)
    refusal = ((cannot_opt_in(obj, facts) if newly else None)
               or submitter_rule(obj, old if updating else None)
               or (Refusal(head_class) if head_class else None))
    if refusal is not None:
        return refusal
    return Changed(first_patch(obj, operation, policy.allocate_timeout), "opted in")


def last(obj: Obj, operation: str, facts: NamespaceFacts) -> Answer:
    """The last stage (after Kueue's webhooks): undo Kueue's defaulting, keep everyone else's."""
    if not is_opted_in(obj):
        return Changed([], "not opted in")
    if handed_to_kueue(obj):
        # The first stage gave it to Kueue in this request or before: Kueue's queue
        # label and suspend are Kueue's to keep.
        return Changed([], "handed to Kueue; nothing to undo")
    kind = str(obj.get("kind"))
    queue = labels(obj).get(c.QUEUE_LABEL)
    ops: Patch = []
    done: list[str] = []
    if queue:
        if operation == "CREATE" and queue == c.DEFAULT_LOCAL_QUEUE and facts.default_queue_exists:
            # Kueue's defaulting (jobframework ApplyDefaultLocalQueue...), CREATE only.
            ops += drop_entries(("metadata", "labels"), metadata(obj).get("labels"), [c.QUEUE_LABEL])
            done.append("Kueue's default queue removed")
        else:
            # The first stage moved every queue label it saw: this one was added
            # after it, by another webhook (a policy engine's mandated queue).
            ours = annotations(obj).get(c.QUEUE_ANNOTATION)
            if ours and ours != queue:
                return Refusal(
                    f"{kind} {display_name(obj)} carries label {c.QUEUE_LABEL}={queue}, added by an "
                    f"admission webhook after raykueue's first one, and annotation "
                    f"{c.QUEUE_ANNOTATION}={ours}: an opted-in cluster has one queue. Make them agree "
                    "(set the annotation to the queue your policy requires), or exempt opted-in "
                    "clusters from that policy")
            ops += move_queue(("metadata",), metadata(obj))
            done.append(f"queue {queue} kept as {c.QUEUE_ANNOTATION}")
    if operation == "CREATE":
        noted = annotations(obj).get(c.SUSPEND_REQUESTED_ANNOTATION) == "true"
        if is_suspended(obj, kind) and queue and not noted:
            # Kueue suspends every object that has a queue label when its webhook
            # runs; without one, a suspend is someone else's (an approval flow) and stays.
            ops.append({"op": "replace", "path": pointer(*SUSPEND[kind]), "value": False})
            done.append("Kueue's suspend undone")
        if get(obj, MANAGED_BY) == c.MULTIKUEUE_MANAGED_BY:
            # The first stage refuses a user's MultiKueue managedBy, so this is
            # Kueue's defaulting (a default queue backed by MultiKueue); without
            # it KubeRay runs the cluster here (nil means KubeRay's own).
            ops.append({"op": "remove", "path": pointer(*MANAGED_BY)})
            done.append("Kueue's MultiKueue managedBy removed")
    return Changed(ops, "; ".join(done) or "nothing of Kueue's to undo")
