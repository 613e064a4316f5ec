"""Freeing the quota of a pod that is done: its Workload deleted or Finished. No I/O.

The per-pod `decide` and the finish of a Workload whose pod vanished both end here,
so a pod's quota is given back by one rule: never while the pod still runs.
"""

from __future__ import annotations

from raykueue.controller import pods as p
from raykueue.controller import removal
from raykueue.controller import workload as w
from raykueue.controller.actions import (
    FINISHED_FAILED,
    FINISHED_POD_DELETED,
    FINISHED_SUCCEEDED,
    Action,
    DeleteWorkload,
    FinishWorkload,
    Wait,
)
from raykueue.core.objects import Obj, metadata

# How long the garbage collector gets to delete the Workload of a pod that is gone
# before raykueue deletes it itself (ControllerConfig.collector_grace_seconds).
COLLECTOR_GRACE_SECONDS = 5.0


def finish(wl: Obj, reason: str, message: str) -> list[Action]:
    if w.is_finished(wl) or p.is_deleting(wl):
        return []
    return [FinishWorkload(p.name(wl), reason, message)]


def release(pod: Obj, wl: Obj, gone: bool = False) -> list[Action]:
    """Free the quota of a pod that is done, and only once it has stopped.

    A pod being deleted keeps its quota while it still runs: its grace period and
    a preStop hook may last a day, and KubeRay's replacement takes quota of its
    own meanwhile. Once it has stopped (`removal.has_stopped`: it ended,
    every container terminated, or it never reached a node) or is gone (`gone`:
    it left the cache, and its Workload's ownerReference lets the garbage
    collector take it too), its Workload is deleted (DeleteWorkload). A pod that
    ended but stays (Succeeded or Failed, not deleted) gets its Workload Finished,
    which keeps the outcome readable until the pod goes; an already Finished
    Workload is left to the garbage collector.
    """
    if w.is_finished(wl) or p.is_deleting(wl):
        return []
    reason, message = end_of_pod(pod)
    if p.is_deleting(pod) and (gone or removal.has_stopped(pod)):
        return [DeleteWorkload(p.name(wl), str(metadata(wl).get("uid") or ""), reason, message)]
    if p.is_deleting(pod):
        return [Wait(f"pod {p.name(pod)} is being deleted but still runs; its Workload "
                     f"{p.name(wl)} holds its quota until it stops")]
    return [FinishWorkload(p.name(wl), reason, message)]


def release_gone(departed: Obj, wl: Obj, waited: float | None,
                 grace: float = COLLECTOR_GRACE_SECONDS) -> list[Action]:
    """Free the quota of a pod that left the cache deleted: `release`, except that a
    Workload the garbage collector is deleting is left to it for `grace` seconds.

    The pod is gone, so the collector deletes every object whose only owner it
    was, our Workload included, as it does for Kueue's own pod Workloads. Ours
    beside it is one DELETE more (the second of the two answers 404) and frees
    the quota no sooner. `waited`: seconds since the watch said the pod went
    (None: unknown, and then we do not wait). After the grace, or for a Workload
    the collector would not take (another owner, or none), the delete is ours.
    """
    actions = release(departed, wl, gone=True)
    if (waited is None or waited >= grace or not collected(wl, departed)
            or not any(isinstance(x, DeleteWorkload) for x in actions)):
        return actions
    return [Wait(f"pod {p.name(departed)} is gone; the garbage collector deletes its Workload "
                 f"{p.name(wl)}, which frees its quota (raykueue deletes it after "
                 f"{grace:.0f}s otherwise)", after=grace - waited)]


def collected(wl: Obj, pod: Obj) -> bool:
    """Whether the garbage collector deletes `wl` once `pod` is gone: the pod, by
    uid, is its only owner, and nothing holds it back (no finalizer)."""
    refs = metadata(wl).get("ownerReferences")
    uid = p.uid(pod)
    return (bool(uid) and isinstance(refs, list) and len(refs) == 1
            and w.owner_pod(wl) == (p.name(pod), uid)
            and not metadata(wl).get("finalizers"))


def end_of_pod(pod: Obj) -> tuple[str, str]:
    phase = p.phase(pod)
    detail = p.status_message(pod)
    if phase == "Succeeded":
        return FINISHED_SUCCEEDED, detail or f"pod {p.name(pod)} succeeded"
    if phase == "Failed":
        return FINISHED_FAILED, detail or f"pod {p.name(pod)} failed"
    return FINISHED_POD_DELETED, f"pod {p.name(pod)} was deleted and has stopped; quota released"
