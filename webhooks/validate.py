"""Who may change what on a pod raykueue gated: the validating decision.

Kept apart from classification on purpose (as Kueue separates its pod
defaulting from its validation): classification runs once at creation and
may fill things in; validation runs on every update and only says no.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from webhooks import contract as c
from webhooks.objects import Obj, display_name, gate_names, labels


@dataclass(frozen=True, slots=True)
class Allowed:
    reason: str


@dataclass(frozen=True, slots=True)
class Denied:
    message: str


Judgement = Allowed | Denied


def judge_update(old: Obj, new: Obj, username: str, controllers: Collection[str]) -> Judgement:
    if c.GATE not in gate_names(old):
        return Allowed("not gated by raykueue")

    if c.GATE not in gate_names(new) and username not in controllers:
        return Denied(
            f"the scheduling gate {c.GATE} on pod {display_name(old)} is lifted by raykueue "
            "when Kueue admits the pod's Workload; it may not be removed by "
            f"{username or 'an anonymous user'}. Run `raykueue explain {display_name(old)}` "
            "to see why the Workload is still pending"
        )

    old_queue = labels(old).get(c.QUEUE_LABEL)
    new_queue = labels(new).get(c.QUEUE_LABEL)
    if old_queue and new_queue != old_queue:
        # The Workload was created for the old queue; moving the pod would
        # leave quota held in one queue for a pod scheduled by another.
        return Denied(
            f"label {c.QUEUE_LABEL} of pod {display_name(old)} is {old_queue!r} and may not "
            "change while the pod waits for admission; delete the pod and let KubeRay "
            "recreate it with the new queue"
        )
    if c.GATE not in gate_names(new):
        return Allowed("gate lifted by the controller")
    return Allowed("gated pod update")
