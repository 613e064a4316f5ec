"""The one rule that lets raykueue remove a pod, as a pure function of live reads.

raykueue deletes a pod for exactly two causes:

- KUEUE_EVICTED: Kueue evicted or preempted the pod's own Workload (for a gang's
  base pod, the base covering it): the live Workload says Evicted=True and
  stands for this very pod (its uid), so the quota is Kueue's to take back.
- OUTSIDE_QUOTA: raykueue's own cause. A pod past the gate whose own Workload
  stayed not admitted for `grace` seconds (counted from the Workload's creation
  or its last admission change) runs outside Kueue's quota. It goes only while
  its RayCluster (read live) still opts in, workers before heads (a head waits
  until no worker of its cluster is a candidate), the lowest priority first.
  A head whose Workload is admitted fits, and is never a candidate.

`decide` proposes a removal from the caches; the handler (`handlers.remove_pod`)
reads the pod, its Workload(s), its RayCluster and, for OUTSIDE_QUOTA, its
cluster's pods and Workloads from the API server and asks `confirm` whether
the removal still holds. Anything else is reported, never deleted: a cache
miss is never evidence.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from raykueue.controller import pods as p
from raykueue.controller import workload as w
from raykueue.controller.actions import OUTSIDE_QUOTA
from raykueue.core import contract as c
from raykueue.core.clock import timestamp
from raykueue.core.objects import Obj, labels, metadata
from raykueue.core.podrole import role_of
from raykueue.core.rayobjects import is_opted_in

KUEUE_EVICTED: Final = "KueueEvicted"
# Event reasons: the removal went ahead, was only reported (RAYKUEUE_ENFORCEMENT=report),
# or the live reads did not prove it (the pod is kept).
REMOVED: Final = "Evicted"
REPORTED: Final = "RemovalReportOnly"
NOT_PROVEN: Final = "RemovalNotProven"

ENFORCE: Final = "enforce"
REPORT: Final = "report"
ENFORCEMENTS: Final = (ENFORCE, REPORT)


@dataclass(frozen=True, slots=True)
class Justification:
    """Whether removing the pod is justified now, by which cause, and the evidence
    (what the Event and the log say either way)."""

    justified: bool
    cause: str  # KUEUE_EVICTED, OUTSIDE_QUOTA, or "" when not justified
    evidence: str


# --- the outside-quota rule (shared by decide, on caches, and confirm, on live reads) ----


def not_admitted_since(wl: Obj) -> float | None:
    """When the Workload's wait for admission began: its creation, or the last change
    of its admission (QuotaReserved/Admitted going False after an eviction)."""
    times = [timestamp(metadata(wl).get("creationTimestamp"))]
    for type_ in (w.QUOTA_RESERVED, w.ADMITTED):
        cond = w.condition(wl, type_)
        if cond is not None:
            times.append(timestamp(cond.get("lastTransitionTime")))
    known = [t for t in times if t is not None]
    return max(known) if known else None


def own_workload(pod: Obj, wl: Obj | None) -> bool:
    """The Workload is raykueue's, for this very pod (not a namesake's), and standing."""
    return (wl is not None and w.is_ours(wl) and p.name(wl) == w.workload_name(pod)
            and w.pod_uid_of(wl) == p.uid(pod) and not p.is_deleting(wl))


def outside_quota_left(pod: Obj, wl: Obj | None, now: float | None, grace: float) -> float | None:
    """Seconds until the pod becomes an outside-quota candidate (0: it is one now);
    None when it is not running outside quota at all."""
    if (p.is_gated(pod) or p.is_deleting(pod) or p.is_terminal(pod)
            or labels(pod).get(c.GANG_LABEL)  # a gang's base covers its pods: its pass judges
            or role_of(pod) not in c.MANAGED_ROLES or not own_workload(pod, wl)):
        return None
    assert wl is not None
    if w.is_admitted(wl) or w.is_evicted(wl) or w.is_finished(wl):
        return None
    since = not_admitted_since(wl)
    if since is None or now is None:
        return None
    return max(since + grace - now, 0.0)


def is_candidate(pod: Obj, wl: Obj | None, now: float | None, grace: float) -> bool:
    return outside_quota_left(pod, wl, now, grace) == 0.0


def _priority(wl: Obj | None) -> int:
    return w.priority_value(wl) if wl is not None else 0


def ahead_of(pod: Obj, wl: Obj | None, peers: Iterable[tuple[Obj, Obj | None]],
             now: float | None, grace: float) -> str | None:
    """Why a candidate must wait for other candidates of its cluster (None: it goes now).

    Workers before heads; among workers, the lowest priority first. Peers with the
    same priority go together (each pass removes one pod, and none of them fits).
    A peer counts while it runs outside quota at all, not only once its own grace is
    over: the head's grace may end first (its Workload is the oldest), and it must
    still wait for the workers that will go before it.
    """
    head = role_of(pod) == c.ROLE_HEAD
    mine = _priority(wl)
    for other, other_wl in peers:
        if p.uid(other) == p.uid(pod) or role_of(other) != c.ROLE_WORKER:
            continue
        if outside_quota_left(other, other_wl, now, grace) is None:
            continue
        if head:
            return f"worker {p.name(other)} of the same cluster is outside quota too; workers go first"
        if _priority(other_wl) < mine:
            return (f"worker {p.name(other)} (priority {_priority(other_wl)}) is outside quota "
                    f"with a lower priority than {mine}; it goes first")
    return None


# --- the live confirmation ---------------------------------------------------------------


def raycluster_ref(pod: Obj) -> Mapping[str, str] | None:
    """The pod's RayCluster owner reference (name, uid), if it has one."""
    refs = metadata(pod).get("ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, dict) and ref.get("kind") == "RayCluster" \
                and str(ref.get("apiVersion", "")).startswith(c.RAY_API_GROUP + "/"):
            return {"name": str(ref.get("name") or ""), "uid": str(ref.get("uid") or "")}
    return None


def _covers_as_base(base: Obj, pod: Obj, own: Obj | None) -> bool:
    """A gang's base covers the pod: same cluster, and the pod has no Workload of its own."""
    gang = labels(pod).get(c.GANG_LABEL)
    return (bool(gang) and w.is_ours(base) and w.owner_pod(base) is None
            and labels(base).get(c.GANG_LABEL) == gang and not own_workload(pod, own))


def confirm(expected_uid: str, pod: Obj | None, own: Obj | None, evidence: Obj | None,
            raycluster: Obj | None, peers: Sequence[tuple[Obj, Obj | None]],
            now: float, grace: float) -> Justification:
    """Whether removing the pod is still justified, from live reads only.

    `expected_uid`: the pod the decision was about. `pod`: the live pod (None: gone).
    `own`: the live Workload named for the pod (`workload.workload_name`). `evidence`:
    the live Workload the decision named when it is not `own` (a gang's base), else
    None. `raycluster`: the live owning RayCluster. `peers`: the live pods of its
    cluster with their own live Workloads (needed for OUTSIDE_QUOTA only).
    """
    if pod is None:
        return Justification(False, "", "the pod is gone already")
    if p.uid(pod) != expected_uid:
        return Justification(False, "", f"a namesake (uid {p.uid(pod)}) stands in place of pod "
                                  f"{expected_uid}; it is not the one decided on")
    if p.is_deleting(pod):
        return Justification(False, "", "the pod is being deleted already")
    name = p.name(pod)

    # (a) Kueue evicted the pod's own Workload (or the gang base covering it).
    for wl in (own, evidence):
        if wl is None or not w.is_evicted(wl) or p.is_deleting(wl):
            continue
        if own_workload(pod, wl) or _covers_as_base(wl, pod, own):
            cond = w.condition(wl, w.EVICTED) or {}
            return Justification(True, KUEUE_EVICTED, (
                f"Workload {p.name(wl)} (uid {p.uid(wl)}) of pod {name} is Evicted=True, "
                f"reason {cond.get('reason') or '?'}: {cond.get('message') or ''}".rstrip()))

    # (b) raykueue's own: past the gate, its own Workload not admitted past the grace.
    if own is None:
        return Justification(False, "", f"no Workload {w.workload_name(pod)} exists for pod {name} "
                                  "in the API server; nothing proves the pod is outside quota")
    if not own_workload(pod, own):
        return Justification(False, "", f"Workload {p.name(own)} is not raykueue's Workload for pod "
                                  f"{name} (uid {p.uid(pod)})")
    left = outside_quota_left(pod, own, now, grace)
    if left is None:
        state = ("admitted" if w.is_admitted(own) else "gated" if p.is_gated(pod)
                 else "finished" if w.is_finished(own) else "evicted" if w.is_evicted(own)
                 else "gang-covered" if labels(pod).get(c.GANG_LABEL) else "not judged")
        return Justification(False, "", f"pod {name} with Workload {p.name(own)}: {state}; neither "
                                  "Kueue evicted it nor does it run outside quota")
    if left > 0:
        return Justification(False, "", f"Workload {p.name(own)} is not admitted, but its grace "
                                  f"has {left:.0f}s left")
    ref = raycluster_ref(pod)
    if ref is None or raycluster is None or p.uid(raycluster) != ref["uid"]:
        return Justification(False, "", f"pod {name}'s RayCluster could not be read live")
    if metadata(raycluster).get("deletionTimestamp"):
        return Justification(False, "", f"RayCluster {p.name(raycluster)} is being deleted; its pods "
                                  "go with it")
    if not is_opted_in(raycluster):
        return Justification(False, "", f"RayCluster {p.name(raycluster)} no longer opts in "
                                  f"({c.STANDALONE_ANNOTATION} is not \"true\")")
    waiting = ahead_of(pod, own, peers, now, grace)
    if waiting is not None:
        return Justification(False, "", waiting)
    since = not_admitted_since(own) or 0.0
    # Stable from pass to pass (a time, not an age), so that a report is sent once.
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since))
    return Justification(True, OUTSIDE_QUOTA, (
        f"pod {name} ({role_of(pod)}) is past the gate while its Workload {p.name(own)} "
        f"(uid {p.uid(own)}, priority {_priority(own)}) has not been admitted since "
        f"{stamp}, longer than the grace of {grace:.0f}s; RayCluster {p.name(raycluster)} "
        f"(uid {p.uid(raycluster)}) opts in"))


def has_stopped(pod: Obj) -> bool:
    """The pod runs nothing any more: it ended (Succeeded/Failed), every container
    has terminated (the kubelet lists each one in containerStatuses), or it was never
    bound to a node (the API server deletes such a pod at once). Until then a pod
    being deleted still runs (its grace period, a preStop hook) and keeps its quota."""
    if p.is_terminal(pod):
        return True
    spec_ = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    if not spec_.get("nodeName"):
        return True
    status = pod.get("status") if isinstance(pod.get("status"), dict) else {}
    statuses = status.get("containerStatuses")
    if not isinstance(statuses, list) or not statuses:
        return False  # bound, and the kubelet has not said what runs: it may
    return all(isinstance(s, dict) and isinstance(s.get("state"), dict)
               and "terminated" in s["state"] for s in statuses)
