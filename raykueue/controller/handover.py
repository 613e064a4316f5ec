"""The Event that tells a user raykueue handed their Ray object to Kueue.

The hand-over itself is the first webhook's (webhooks/rayobjects.py `kueue_takes`):
pure and side-effect free, it marks the object with
`raykueue.io/handed-to-kueue`. The note for humans is written here, from the
RayCluster, RayJob and RayService watches, once the API server has stored that
mark: an Event about a hand-over that another webhook then refused would be false.

The Event goes on the object Kueue suspended, the one its user applied and looks
at: for a RayJob that is the RayJob (KubeRay deletes its RayCluster on the
suspend and makes a new one, marked from its creation, once Kueue admits it; a
cluster created marked is never reported, so there is one Event, not two).

Only the leader records, once per object it saw change to handed over. Events
are notes, best effort (kube/events.py), never a gate on anything.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from raykueue.core import contract as c
from raykueue.core.objects import Obj, annotations, display_name, labels, metadata
from raykueue.kube.cache import ADDED, DELETED, MODIFIED
from raykueue.kube.events import WARNING, EventRecorder


def handover_message(cluster: Obj) -> str | None:
    """What happened and what to change, for a Ray object raykueue handed to Kueue; None otherwise."""
    why = annotations(cluster).get(c.HANDED_TO_KUEUE_ANNOTATION)
    if why is None:
        return None
    kind = str(cluster.get("kind") or c.RAYCLUSTER_KIND)
    queue = labels(cluster).get(c.QUEUE_LABEL)
    namespace = metadata(cluster).get("namespace") or "its namespace"
    queued = (f"its queue is now Kueue's label {c.QUEUE_LABEL}={queue}" if queue else
              f"it names no queue, so Kueue cannot admit it: set the label {c.QUEUE_LABEL}")
    return (
        f"Kueue took {kind} {display_name(cluster)} ({why}) and admits it whole as one "
        f"Workload. raykueue handed it over: the raykueue.io/opted-in stamp is off its pod "
        f"templates, so its pods are Kueue's and never wait for raykueue; {queued}. raykueue "
        f"deleted no pod. To keep it this way, remove {c.STANDALONE_ANNOTATION} from its "
        f"manifest (allowed without a suspend now). To run it under raykueue again, take "
        f"{namespace} out of Kueue's managedJobsNamespaceSelector (remove the namespace "
        f"label) or turn manageJobsWithoutQueueName off, then recreate the {kind}")


class HandOverEvents:
    """A Ray-object cache handler: one `HandedToKueue` Event per hand-over seen happen.

    One instance per cache (RayClusters, RayJobs, RayServices). It reports an
    object it saw without the mark and then with it, so one that was handed over
    before this replica watched it (a restart), or created marked (a RayCluster
    KubeRay makes from a handed-over RayJob), is not reported. `prime` takes the
    objects the cache already holds when the handler is registered after the
    cache started. The Event is written off the watch thread: the webhook reads
    the same cache, and an Event must never delay it.
    """

    def __init__(self, events: EventRecorder, is_leader: Callable[[], bool]) -> None:
        self._events = events
        self._is_leader = is_leader
        self._unmarked: set[str] = set()
        self._lock = threading.Lock()

    def prime(self, clusters: Iterable[Obj]) -> None:
        for cluster in clusters:
            self(ADDED, cluster)

    def __call__(self, event: str, cluster: Obj) -> None:
        uid = metadata(cluster).get("uid")
        if not isinstance(uid, str):
            return
        message = handover_message(cluster) if event != DELETED else None
        with self._lock:
            if message is None:
                if event == DELETED:
                    self._unmarked.discard(uid)
                else:
                    self._unmarked.add(uid)
                return
            if uid not in self._unmarked:
                return
            self._unmarked.discard(uid)
        if event == MODIFIED and self._is_leader():
            threading.Thread(target=self._events.record, name="handover-event", daemon=True,
                             args=(_regarding(cluster), WARNING, c.HANDED_TO_KUEUE_REASON, message),
                             kwargs={"action": "HandOver"}).start()


def _regarding(obj: Obj) -> Obj:
    # The owner caches keep kind and metadata (webhooks/reads.py keep_metadata; the RayClusters'
    # core/rayobjects.slim_raycluster), not always the apiVersion.
    return {"apiVersion": f"{c.RAY_API_GROUP}/v1", **obj, "kind": str(obj.get("kind") or c.RAYCLUSTER_KIND)}
