"""A gang's base Workload: reading gang pods, building the base, trusting it. No I/O.

Anyone allowed to create or edit Workloads can make one under the base's name
(it is derived from the RayCluster's uid, which anyone who can read the cluster
sees), and Kueue admits it. Pods are released under the base only while it is
the one `build_base` makes in every respect that decides what Kueue charges:
the RayCluster as its owner, the head's queue and priority class, a `head`
podSet of one, each podSet requesting what its group's pods request, and no
partial admission. The counts per group are not part of that check: they follow
`minReplicas` (docs/GANG.md), and slots are never filled beyond what Kueue
admitted (`admitted_counts`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from raykueue.controller import pods as p
from raykueue.controller import workload as w
from raykueue.controller import workload_match as wm
from raykueue.controller import workload_status as ws
from raykueue.controller.gang import rule as g
from raykueue.core import contract as c
from raykueue.core.objects import Obj, annotations, labels, metadata, spec
from raykueue.core.podrole import role_of


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


def spec_counts(base: Obj) -> dict[str, int]:
    """The base's podSet counts by name, as its spec asks."""
    out: dict[str, int] = {}
    for pod_set in spec(base).get("podSets") or []:
        if isinstance(pod_set, dict) and isinstance(pod_set.get("count"), int):
            out[str(pod_set.get("name"))] = pod_set["count"]
    return out


def admitted_counts(base: Obj) -> dict[str, int]:
    """What Kueue charged per podSet: its admission's counts, never more than the spec's."""
    asked = spec_counts(base)
    status = base.get("status")
    admission = status.get("admission") if isinstance(status, dict) else None
    assignments = admission.get("podSetAssignments") if isinstance(admission, dict) else None
    charged: dict[str, int] = {}
    for item in assignments if isinstance(assignments, list) else []:
        if isinstance(item, dict) and isinstance(item.get("count"), int):
            charged[str(item.get("name"))] = item["count"]
    return {name: min(n, charged.get(name, n)) for name, n in asked.items()}


def base_state(base: Obj | None) -> g.Base:
    if base is None:
        return g.Base()
    admitted = w.is_admitted(base) and not w.is_evicted(base) and not w.is_finished(base)
    return g.Base(exists=True, admitted=admitted, reclaimed=ws.reclaimable(base),
                  counts=admitted_counts(base) if admitted else spec_counts(base))


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


def pod_set_sizings(wl: Obj) -> dict[str, str]:
    """Each podSet's sizing fingerprint by podSet name, from a whole or a slimmed Workload."""
    found = wm.pod_sets_fingerprint(wl)
    if found.startswith(wm.SETS_PREFIX):
        value = json.loads(found[len(wm.SETS_PREFIX):])
        return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}
    return {w.POD_SET: found} if found else {}


def fits(pod: Obj, base: Obj) -> bool:
    """Whether the base's podSet for the pod's group requests what the pod requests."""
    return pod_set_sizings(base).get(group_of(pod)) == wm.pod_sizing(pod)


def mismatch(base: Obj, head: Obj, released: Sequence[Obj]) -> str | None:
    """Why `base` is not a base raykueue would make for this cluster, or None.

    `released`: the pods past the gate without a Workload of their own, which
    stand in the base: each must request what its podSet requests. A gated pod
    that does not is never released under it (`fits`), so a worker podSet no
    pod fits only holds slots that are handed back.
    """
    ref = raycluster_ref(head)
    owners = [x for x in metadata(base).get("ownerReferences") or [] if isinstance(x, dict)]
    if (ref is None or len(owners) != 1 or owners[0].get("kind") != c.RAYCLUSTER_KIND
            or owners[0].get("uid") != ref.get("uid") or owners[0].get("controller") is True):
        return "its owner is not the RayCluster (one owner reference, not a controller one)"
    queue = labels(head).get(c.QUEUE_LABEL) or None
    if w.queue_name(base) != queue:
        return f"its queue {w.queue_name(base)!r} is not the head's {queue!r}"
    wanted = labels(head).get(c.PRIORITY_CLASS_LABEL) or None
    if w.priority_class_name(base) != wanted:
        return f"its priority class {w.priority_class_name(base)!r} is not the head's {wanted!r}"
    pod_sets = [x for x in spec(base).get("podSets") or [] if isinstance(x, dict)]
    names = [str(x.get("name")) for x in pod_sets]
    if len(set(names)) != len(names) or spec_counts(base).get(g.HEAD_GROUP) != 1:
        return "its podSets are not one per group with a head podSet of one"
    if any("minCount" in x for x in pod_sets):
        return "a podSet asks for partial admission (minCount)"
    if w.is_quota_reserved(base) and admitted_counts(base) != spec_counts(base):
        return "Kueue admitted fewer pods than its podSets ask for"
    if not fits(head, base):
        return "its head podSet does not request what the head requests"
    stray = next((x for x in released if not fits(x, base)), None)
    if stray is not None:
        return f"its podSet {group_of(stray)} does not request what pod {p.name(stray)} requests"
    return None


def describe_counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{name} x{n}" for name, n in sorted(counts.items()))
