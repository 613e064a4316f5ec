"""A pod's identity and role in the contract, one rule for the webhook and the controller."""

from __future__ import annotations

from raykueue.core import contract as c
from raykueue.core.objects import Obj, gate_names, labels


def role_of(pod: Obj) -> str | None:
    """`head` or `worker` for the pods raykueue manages, None for any other."""
    role = labels(pod).get(c.NODE_TYPE_LABEL)
    return role if role in c.MANAGED_ROLES else None


def kueue_claims(pod: Obj) -> str | None:
    """Why Kueue's plain-pod integration already manages this pod, if it does.

    The webhook leaves such a pod ungated and the controller leaves it without
    a Workload: counting its quota twice is the one thing worse than neither.
    """
    if c.KUEUE_POD_GATE in gate_names(pod):
        return f"carries Kueue's scheduling gate {c.KUEUE_POD_GATE}"
    if labels(pod).get(c.KUEUE_MANAGED_LABEL) == "true":
        return f"carries Kueue's label {c.KUEUE_MANAGED_LABEL}=true"
    return None
