"""Which role a pod plays in the contract (Ray head or worker, Kueue's, a Ray cluster's),
one rule for the webhook and the controller. (controller/pods.py reads the
controller's cached pods; this is the contract's side.)"""

from __future__ import annotations

from raykueue.core import contract as c
from raykueue.core.objects import Obj, gate_names, labels, metadata, ref_group


def role_of(pod: Obj) -> str | None:
    """`head` or `worker` for the pods raykueue manages, None for any other."""
    role = labels(pod).get(c.NODE_TYPE_LABEL)
    return role if role in c.MANAGED_ROLES else None


def kueue_claims(pod: Obj) -> str | None:
    """Why Kueue's plain-pod integration already manages this pod, if it does.

    At creation the pod webhook takes an opted-in pod back (Kueue's pod webhook
    ran earlier in the same request, so nothing of Kueue's exists for it yet);
    afterwards the controller leaves such a pod without a Workload and adoption
    skips it: counting its quota twice is the one thing worse than neither.
    """
    if c.KUEUE_POD_GATE in gate_names(pod):
        return f"carries Kueue's scheduling gate {c.KUEUE_POD_GATE}"
    if labels(pod).get(c.KUEUE_MANAGED_LABEL) == "true":
        return f"carries Kueue's label {c.KUEUE_MANAGED_LABEL}=true"
    return None


def has_ray_owner(pod: Obj) -> bool:
    """Whether any owner reference points into ray.io: the pod belongs to a Ray cluster.

    The same test as the pod webhooks' CEL (manifests/webhooks.yaml), so that a
    pod the Fail-closed webhook sees as bare is bare here too.
    """
    refs = metadata(pod).get("ownerReferences")
    return isinstance(refs, list) and any(
        isinstance(ref, dict) and ref_group(ref) == c.RAY_API_GROUP for ref in refs)
