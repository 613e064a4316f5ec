"""Events on the RayCluster, where a Ray user looks (`kubectl describe raycluster`).

raykueue's other Events regard pods and Workloads; a Ray user reads the
RayCluster. This module says three things there, each about the cluster's
Workloads as Kueue left them:

- `WaitingForQuota` (Normal): which of the cluster's pods wait, in which
  LocalQueue, and Kueue's own pending message (its `QuotaReserved=False`).
- `Admitted` (Normal): pods Kueue admitted after such a wait, and how long
  they waited. A pod admitted at once is the normal case and says nothing.
- `Preempted` / `EvictedByKueue` (Warning): which pod's Workload Kueue evicted,
  with Kueue's reason and message. (Removals raykueue itself makes are said by
  the removal handler, not here.)

The core is pure: `read` turns a Workload into what this module needs of it,
`Tracker` remembers each Workload's last state and turns changes into notes,
`Limiter` decides when a cluster may hear a reason again. `ClusterStatus` is
the edge: a handler on the controller's Workload cache (no API read of its
own) and a thread that writes the Events.

Rate: the events.k8s.io Events raykueue writes each get a name of their own,
so the API server aggregates nothing and `kubectl describe` lists every one
(client-go's correlator, which would, is not in this path). So this module
limits itself: at most one Event per reason per cluster per `interval`
seconds; transitions seen meanwhile are held and said together in the next
one. A standing wait is said again only when what it says changes, or after
`refresh` seconds, so that it outlives the API server's Event TTL (1 h by
default) while the cluster still waits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

from raykueue.controller import pods as p
from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.core.clock import timestamp
from raykueue.core.objects import Obj, labels, metadata
from raykueue.kube.events import NORMAL, WARNING

log = logging.getLogger("raykueue.controller.cluster_status")

# Event reasons on the RayCluster.
WAITING_FOR_QUOTA: Final = "WaitingForQuota"
ADMITTED: Final = "Admitted"
PREEMPTED: Final = "Preempted"
EVICTED_BY_KUEUE: Final = "EvictedByKueue"
REASONS: Final = (WAITING_FOR_QUOTA, ADMITTED, PREEMPTED, EVICTED_BY_KUEUE)
_TYPES: Final = {WAITING_FOR_QUOTA: NORMAL, ADMITTED: NORMAL, PREEMPTED: WARNING,
                 EVICTED_BY_KUEUE: WARNING}

# At most one Event per reason per cluster this often.
INTERVAL_SECONDS: Final = 60.0
# A standing wait is said again after this long even if nothing changed: the
# API server drops Events after --event-ttl (1 h by default).
REFRESH_SECONDS: Final = 1800.0
# A Workload Kueue has not answered yet counts as waiting after this long.
# Kueue admits a Workload that fits in well under a second; it writes its
# pending message on one of several identical Workloads only (it skips the
# twins of one it found inadmissible), so the twins count by age.
WAITING_GRACE_SECONDS: Final = 10.0
# Pods named in one Event; the rest are counted.
NAMES_SHOWN: Final = 5

# A Workload's state as this module sees it.
NEW = "new"  # Kueue has not answered yet
PENDING = "pending"  # QuotaReserved=False: Kueue tried and said why not
RESERVED = "reserved"  # quota reserved, admission checks pending
RUNNING = "admitted"
EVICTED = "evicted"
ENDED = "ended"  # finished or being deleted

ClusterKey = tuple[str, str]  # (namespace, RayCluster name)


@dataclass(frozen=True, slots=True)
class Seen:
    """What this module reads of one of our Workloads."""

    uid: str
    cluster: ClusterKey
    pod: str  # what a user calls it: the pod's name, or the gang base's
    state: str
    queue: str  # the LocalQueue ("" when none)
    created: float | None  # the Workload's creationTimestamp, epoch seconds
    reason: str = ""  # Kueue's: of QuotaReserved=False (pending) or Evicted (evicted)
    message: str = ""
    admitted: float | None = None  # the Admitted condition's lastTransitionTime

    def waiting(self, now: float, grace: float) -> bool:
        """Waiting for quota: Kueue said so, or has left it unanswered past `grace`."""
        if self.state == PENDING:
            return True
        return self.state == NEW and self.created is not None and now - self.created >= grace


def read(wl: Obj) -> Seen | None:
    """One of our Workloads of a Ray cluster, or None (not ours, no cluster label)."""
    if not w.is_ours(wl):
        return None
    cluster = labels(wl).get(c.CLUSTER_LABEL)
    meta = metadata(wl)
    ns, uid = meta.get("namespace"), meta.get("uid")
    if not cluster or not ns or not uid:
        return None
    owner = w.owner_pod(wl)
    pod = owner[0] if owner is not None and owner[0] else f"gang base {meta.get('name')}"
    base = Seen(str(uid), (str(ns), str(cluster)), pod, NEW, w.queue_name(wl) or "",
                timestamp(meta.get("creationTimestamp")))
    if w.is_finished(wl) or p.is_deleting(wl):
        return _with(base, ENDED)
    if w.is_evicted(wl):
        cond = w.condition(wl, w.EVICTED) or {}
        return _with(base, EVICTED, str(cond.get("reason") or ""), str(cond.get("message") or ""))
    if w.is_admitted(wl):
        cond = w.condition(wl, w.ADMITTED) or {}
        return _with(base, RUNNING, admitted=timestamp(cond.get("lastTransitionTime")))
    if w.is_quota_reserved(wl):
        return _with(base, RESERVED)
    cond = w.condition(wl, w.QUOTA_RESERVED)
    if cond is not None and cond.get("status") == "False":
        return _with(base, PENDING, str(cond.get("reason") or ""), str(cond.get("message") or ""))
    return base


def _with(seen: Seen, state: str, reason: str = "", message: str = "",
          admitted: float | None = None) -> Seen:
    return Seen(seen.uid, seen.cluster, seen.pod, state, seen.queue, seen.created, reason,
                message, admitted)


# --- what to say -------------------------------------------------------------------


def _names(items: Iterable[str]) -> str:
    names = sorted(items)
    shown = ", ".join(names[:NAMES_SHOWN])
    more = len(names) - NAMES_SHOWN
    return f"{shown} and {more} more" if more > 0 else shown


def _pods(n: int) -> str:
    return f"{n} pod" if n == 1 else f"{n} pods"


def waiting_message(items: Iterable[Seen]) -> str:
    """Who waits, where, and Kueue's words; stable while none of that changes (no ages)."""
    by_queue: dict[str, list[Seen]] = {}
    for item in items:
        by_queue.setdefault(item.queue, []).append(item)
    parts: list[str] = []
    for queue in sorted(by_queue):
        group = by_queue[queue]
        where = f"LocalQueue {queue}" if queue else "no LocalQueue"
        said = sorted({x.message for x in group if x.message})
        kueue = f"; Kueue: {' | '.join(said)}" if said else "; Kueue has not said why yet"
        verb = "waits" if len(group) == 1 else "wait"
        parts.append(f"{_pods(len(group))} {verb} for quota in {where} "
                     f"({_names(x.pod for x in group)}){kueue}")
    return ". ".join(parts)


def admitted_message(items: Iterable[Seen]) -> str:
    items = list(items)

    def one(x: Seen) -> str:
        if x.admitted is None or x.created is None:
            return x.pod
        return f"{x.pod} after {max(x.admitted - x.created, 0.0):.0f}s"
    return f"Kueue admitted {_pods(len(items))} that waited for quota: {_names(map(one, items))}"


def evicted_message(items: Iterable[Seen]) -> str:
    by_why: dict[tuple[str, str], list[str]] = {}
    for x in items:
        by_why.setdefault((x.reason, x.message), []).append(x.pod)
    return ". ".join(f"Kueue evicted the Workload of {_names(pods)}: {reason}: {message}"
                     for (reason, message), pods in sorted(by_why.items()))


def eviction_reason(seen: Seen) -> str:
    return PREEMPTED if seen.reason == "Preempted" else EVICTED_BY_KUEUE


# --- memory: Workloads' last states, transitions held for the next Event --------------


@dataclass(slots=True)
class _Cluster:
    workloads: dict[str, Seen] = field(default_factory=dict)  # by uid
    held: dict[str, list[Seen]] = field(default_factory=dict)  # reason -> transitions


class Tracker:
    """Each Workload's last state, per cluster; no I/O, no clock of its own.

    A Workload seen for the first time (the initial list after a restart, or a
    relist) only sets what is remembered: an eviction or admission already in
    place then was said by whoever saw it happen.
    """

    def __init__(self, grace: float = WAITING_GRACE_SECONDS) -> None:
        self.grace = grace
        self._clusters: dict[ClusterKey, _Cluster] = {}

    def observe(self, event: str, wl: Obj, now: float) -> ClusterKey | None:
        seen = read(wl)
        if seen is None:
            return None
        entry = self._clusters.setdefault(seen.cluster, _Cluster())
        before = entry.workloads.get(seen.uid)
        if event == "DELETED" or seen.state == ENDED:
            entry.workloads.pop(seen.uid, None)
        else:
            entry.workloads[seen.uid] = seen
        if before is not None and before.state != seen.state:
            if seen.state == EVICTED:
                entry.held.setdefault(eviction_reason(seen), []).append(seen)
            elif seen.state == RUNNING and before.waiting(now, self.grace):
                entry.held.setdefault(ADMITTED, []).append(seen)
        if not entry.workloads and not entry.held:
            del self._clusters[seen.cluster]
        return seen.cluster

    def clusters(self) -> list[ClusterKey]:
        return list(self._clusters)

    def waiting(self, cluster: ClusterKey, now: float) -> list[Seen]:
        entry = self._clusters.get(cluster)
        if entry is None:
            return []
        return [x for x in entry.workloads.values() if x.waiting(now, self.grace)]

    def held(self, cluster: ClusterKey, reason: str) -> list[Seen]:
        entry = self._clusters.get(cluster)
        return list(entry.held.get(reason, ())) if entry is not None else []

    def said(self, cluster: ClusterKey, reason: str) -> None:
        """The held transitions of `reason` went out in an Event."""
        entry = self._clusters.get(cluster)
        if entry is None:
            return
        entry.held.pop(reason, None)
        if not entry.workloads and not entry.held:
            del self._clusters[cluster]


class Limiter:
    """At most one Event per (cluster, reason) per `interval`; a standing message
    again only when it changed or after `refresh`."""

    def __init__(self, interval: float = INTERVAL_SECONDS,
                 refresh: float = REFRESH_SECONDS) -> None:
        self.interval = interval
        self.refresh = refresh
        self._last: dict[tuple[ClusterKey, str], tuple[float, str]] = {}

    def open(self, cluster: ClusterKey, reason: str, now: float) -> bool:
        last = self._last.get((cluster, reason))
        return last is None or now - last[0] >= self.interval

    def due(self, cluster: ClusterKey, reason: str, message: str, now: float, *,
            standing: bool) -> bool:
        last = self._last.get((cluster, reason))
        if last is None:
            return True
        at, said = last
        if now - at < self.interval:
            return False
        return not standing or said != message or now - at >= self.refresh

    def sent(self, cluster: ClusterKey, reason: str, message: str, now: float) -> None:
        self._last[(cluster, reason)] = (now, message)

    def forget_before(self, moment: float) -> None:
        """Entries older than any window they could still close."""
        for key in [k for k, (at, _) in self._last.items() if at < moment]:
            del self._last[key]


@dataclass(frozen=True, slots=True)
class Note:
    cluster: ClusterKey
    type: str
    reason: str
    message: str


def plan(tracker: Tracker, limiter: Limiter, now: float) -> list[Note]:
    """The Events due now, marked as said in both memories (pure but for those)."""
    notes: list[Note] = []
    for cluster in tracker.clusters():
        for reason in (ADMITTED, PREEMPTED, EVICTED_BY_KUEUE):
            held = tracker.held(cluster, reason)
            if not held or not limiter.open(cluster, reason, now):
                continue
            text = admitted_message(held) if reason == ADMITTED else evicted_message(held)
            notes.append(Note(cluster, _TYPES[reason], reason, text))
            limiter.sent(cluster, reason, text, now)
            tracker.said(cluster, reason)
        if not limiter.open(cluster, WAITING_FOR_QUOTA, now):
            continue
        waiting = tracker.waiting(cluster, now)
        if not waiting:
            continue
        text = waiting_message(waiting)
        if limiter.due(cluster, WAITING_FOR_QUOTA, text, now, standing=True):
            notes.append(Note(cluster, NORMAL, WAITING_FOR_QUOTA, text))
            limiter.sent(cluster, WAITING_FOR_QUOTA, text, now)
    limiter.forget_before(now - max(limiter.interval, limiter.refresh))
    return notes


# --- the edge: fed by the Workload cache, writes Events ------------------------------


def regarding(raycluster: Obj) -> Obj:
    """The RayCluster as an Event's subject: a listed item may lack its kind."""
    return {"apiVersion": f"{c.RAY_API_GROUP}/v1", "kind": c.RAYCLUSTER_KIND, **raycluster}


class ClusterStatus:
    """`on_workload` is a handler on the controller's Workload cache; `run` writes
    the Events every `tick` seconds. `raycluster(ns, name)` is the cached
    RayCluster the Event regards (none: nothing is said, as without a uid
    `kubectl describe` would not show it); `record(obj, type, reason, message)`
    writes an Event."""

    def __init__(self, raycluster: Callable[[str, str], Obj | None],
                 record: Callable[[Obj, str, str, str], None], *,
                 interval: float = INTERVAL_SECONDS, refresh: float = REFRESH_SECONDS,
                 grace: float = WAITING_GRACE_SECONDS,
                 clock: Callable[[], float] = time.time) -> None:
        self._raycluster = raycluster
        self._record = record
        self._clock = clock
        self._tracker = Tracker(grace)
        self._limiter = Limiter(interval, refresh)
        self._lock = threading.Lock()  # the watch thread observes, the writer plans

    def on_workload(self, event: str, wl: Obj) -> None:
        with self._lock:
            self._tracker.observe(event, wl, self._clock())

    def flush(self) -> list[Note]:
        with self._lock:
            notes = plan(self._tracker, self._limiter, self._clock())
        for note in notes:
            target = self._raycluster(*note.cluster)
            if target is None:
                log.debug("%s/%s: no RayCluster cached; %s not said", *note.cluster, note.reason)
                continue
            self._record(regarding(target), note.type, note.reason, note.message)
        return notes

    def run(self, stop: threading.Event, tick: float) -> None:
        while not stop.wait(tick):
            try:
                self.flush()
            except Exception:
                log.exception("RayCluster status Events failed; next try in %.0fs", tick)

    def start(self, stop: threading.Event, tick: float = 1.0) -> threading.Thread:
        thread = threading.Thread(target=self.run, args=(stop, tick), name="cluster-status",
                                  daemon=True)
        thread.start()
        return thread
