"""Who may change what on a pod raykueue gated: the validating decision.

Kept apart from classification on purpose (as Kueue separates its pod
defaulting from its validation): classification runs once at creation and
may fill things in; validation runs on every update and only says no.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Final

from raykueue.core import contract as c
from raykueue.core.objects import Obj, display_name, gate_names, labels, metadata
from raykueue.core.refusal import Refusal

# Labels that decide whether and how a gated pod is admitted. The Workload was
# built from them, and the validating webhook's objectSelector (ray.io/node-type
# Exists) only sees an update whose old or new pod still carries that label:
# dropping it in one update would hide the next one, the gate's removal, from
# this webhook. So none of them may change while the gate is on, for anyone.
FROZEN_WHILE_GATED: Final = (
    c.NODE_TYPE_LABEL,
    c.CLUSTER_LABEL,
    c.GROUP_LABEL,
    c.QUEUE_LABEL,
    c.PRIORITY_CLASS_LABEL,
    c.MANAGED_BY_LABEL,
    # The pod webhooks' scope: a pod that lost it would be judged as unstamped.
    c.OPTED_IN_LABEL,
)


@dataclass(frozen=True, slots=True)
class Allowed:
    reason: str


Judgement = Allowed | Refusal


def judge_update(old: Obj, new: Obj, username: str, controllers: Collection[str]) -> Judgement:
    if c.GATE not in gate_names(old):
        return Allowed("not gated by raykueue")

    if c.GATE not in gate_names(new) and username not in controllers:
        return Refusal(
            f"the scheduling gate {c.GATE} on pod {display_name(old)} is lifted by raykueue "
            "when Kueue admits the pod's Workload; it may not be removed by "
            f"{username or 'an anonymous user'}. Run `raykueue explain {_explain_args(old)}` "
            "to see why the Workload is still pending"
        )

    moved = _frozen_label_change(old, new)
    if moved is not None:
        return Refusal(moved)
    if c.GATE not in gate_names(new):
        return Allowed("gate lifted by the controller")
    return Allowed("gated pod update")


def _explain_args(pod: Obj) -> str:
    # With -n: explain otherwise reads the kubeconfig context's namespace, maybe not the pod's.
    namespace = metadata(pod).get("namespace")
    name = display_name(pod)
    return f"-n {namespace} {name}" if isinstance(namespace, str) and namespace else name


def _frozen_label_change(old: Obj, new: Obj) -> str | None:
    """Why the update is denied, if it adds, changes or removes a frozen label."""
    before, after = labels(old), labels(new)
    for key in FROZEN_WHILE_GATED:
        was, now = before.get(key), after.get(key)
        if was == now:
            continue
        if key == c.QUEUE_LABEL:
            # The Workload was created for the old queue; moving the pod would
            # leave quota held in one queue for a pod scheduled by another.
            return (f"label {key} of pod {display_name(old)} is {was!r} and may not change "
                    "while the pod waits for admission; delete the pod and let KubeRay "
                    "recreate it with the new queue")
        change = "removed" if now is None else f"set to {now!r}"
        return (f"label {key} of pod {display_name(old)} may not be {change} while the pod "
                f"carries the scheduling gate {c.GATE} (it was {was!r}): raykueue built the "
                "pod's Workload from it; delete the pod and let KubeRay recreate it instead")
    return None
