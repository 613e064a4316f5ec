"""Stuck gates: how long the oldest gated pod has waited, per queue and why.

`gated(pods, workloads, now, head_first=...)` is pure: it sorts every gated pod
into one of three reasons and ages it from its creation. `StuckGates` runs it
on the controller's caches every few seconds, exports the oldest age per
(queue, reason) as `raykueue_gated_pod_oldest_age_seconds`, and sends a pod
that has waited past the grace period without a Workload one Event saying
why (and queues it again, so that it gets one if nothing stands in the way).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from raykueue.controller import decide as d
from raykueue.controller import metrics as m
from raykueue.controller import pods as p
from raykueue.controller import workload as w
from raykueue.controller.explain import verdict
from raykueue.core import contract as c
from raykueue.core.clock import parse_time
from raykueue.core.objects import Obj, labels, metadata
from raykueue.core.pods import role_of
from raykueue.kube.events import WARNING

log = logging.getLogger("raykueue.controller.stuck")

# Its Workload exists: Kueue has not admitted it (or the gate is about to go).
WAITING_FOR_QUOTA: Final = "waiting_for_quota"
# A worker whose cluster's head is not admitted yet (head-first): no Workload by design.
WAITING_FOR_HEAD: Final = "waiting_for_head"
# No Workload and nothing in the design that explains it: a missing queue label or
# WorkloadPriorityClass, a conflict with Kueue, or Workload creation failing.
NO_WORKLOAD: Final = "no_workload"
REASONS: Final = (WAITING_FOR_QUOTA, WAITING_FOR_HEAD, NO_WORKLOAD)

EVENT_REASON: Final = "GatedWithoutWorkload"


@dataclass(frozen=True, slots=True)
class Gated:
    pod: Obj
    queue: str  # "" when the pod has no queue label
    reason: str
    age: float  # seconds since the pod was created
    workloads: tuple[Obj, ...]  # every Workload that names this pod (ours or not)


def gated(pods: Iterable[Obj], workloads: Iterable[Obj], now: float, *,
          head_first: bool) -> list[Gated]:
    """Every pod still behind raykueue's gate, with why and for how long.

    Pods being deleted or already ended are not waiting for anything.
    """
    pods = list(pods)
    live = [x for x in pods if p.is_gated(x) and not p.is_deleting(x) and not p.is_terminal(x)]
    by_pod: dict[str, list[Obj]] = {}
    for wl in workloads:
        uid = w.pod_uid_of(wl)
        if uid:
            by_pod.setdefault(uid, []).append(wl)
    heads: dict[tuple[str, str], list[Obj]] = {}
    for pod in pods:
        cluster = p.cluster(pod)
        if cluster and role_of(pod) == c.ROLE_HEAD:
            heads.setdefault((p.key(pod)[0], cluster), []).append(pod)

    def head_admitted(pod: Obj) -> bool:
        cluster = p.cluster(pod)
        found = heads.get((p.key(pod)[0], cluster), []) if cluster else []
        # As the loop judges it: each head with its own Workload, finished or not.
        return d.head_admitted((h, next((x for x in by_pod.get(p.uid(h), ()) if w.is_ours(x)), None))
                               for h in found)

    out: list[Gated] = []
    for pod in live:
        named = tuple(by_pod.get(p.uid(pod), ()))
        if _current(named) is not None:
            reason = WAITING_FOR_QUOTA
        elif (head_first and role_of(pod) == c.ROLE_WORKER and not named
              and not head_admitted(pod)):
            reason = WAITING_FOR_HEAD
        else:
            reason = NO_WORKLOAD
        created = parse_time(metadata(pod).get("creationTimestamp"))
        age = max(now - created.timestamp(), 0.0) if created is not None else 0.0
        out.append(Gated(pod, str(labels(pod).get(c.QUEUE_LABEL) or ""), reason, age, named))
    return out


def oldest(items: Iterable[Gated]) -> dict[tuple[str, str], float]:
    """(queue, reason) -> age of its oldest gated pod."""
    ages: dict[tuple[str, str], float] = {}
    for item in items:
        key = (item.queue, item.reason)
        ages[key] = max(ages.get(key, 0.0), item.age)
    return ages


def overdue(items: Iterable[Gated], grace_seconds: float) -> list[Gated]:
    """Pods past the grace period without a Workload and without a reason by design."""
    return [x for x in items if x.reason == NO_WORKLOAD and x.age >= grace_seconds]


def why_no_workload(item: Gated, ctx: d.Context) -> str:
    actions = d.decide(item.pod, item.workloads, ctx)
    if any(isinstance(a, d.CreateWorkload) for a in actions):
        # Said by the controller itself, so not `verdict`'s "is the controller running?".
        return "creating its Workload has not succeeded yet; the controller retries (its log says why)"
    return verdict(item.pod, item.workloads, ctx)


def _current(workloads: Iterable[Obj]) -> Obj | None:
    return next((x for x in workloads if w.is_ours(x) and not w.is_finished(x)
                 and not w.is_deleting(x)), None)


class StuckGates:
    """Keeps the gauge current while this replica runs the controller.

    `record(pod, type, reason, message)` is the controller's once-per-pod Event
    writer, `context(pod)` its decision context, `requeue(pod)` puts the pod
    back on its work queue.
    """

    def __init__(self, pods: Callable[[], list[Obj]], workloads: Callable[[], list[Obj]], *,
                 head_first: bool, grace_seconds: float,
                 context: Callable[[Obj], d.Context],
                 record: Callable[[Obj, str, str, str], None],
                 requeue: Callable[[Obj], None],
                 clock: Callable[[], float] = time.time) -> None:
        self._pods = pods
        self._workloads = workloads
        self._head_first = head_first
        self._grace = grace_seconds
        self._context = context
        self._record = record
        self._requeue = requeue
        self._clock = clock
        self._exported: set[tuple[str, str]] = set()

    def update(self) -> list[Gated]:
        items = gated(self._pods(), self._workloads(), self._clock(), head_first=self._head_first)
        self._export(oldest(items))
        for item in overdue(items, self._grace):
            self._report(item)
        return items

    def clear(self) -> None:
        """A replica that stopped leading must not keep exporting stale ages."""
        self._export({})

    def run(self, stop: threading.Event, interval: float) -> None:
        try:
            while not stop.wait(interval):
                try:
                    self.update()
                except Exception:
                    log.exception("updating the stuck-gates gauge failed; next try in %.0fs", interval)
        finally:
            self.clear()

    def start(self, stop: threading.Event, interval: float) -> threading.Thread:
        thread = threading.Thread(target=self.run, args=(stop, interval), name="stuck-gates",
                                  daemon=True)
        thread.start()
        return thread

    def _export(self, ages: Mapping[tuple[str, str], float]) -> None:
        for queue, reason in self._exported - set(ages):
            m.GATED_OLDEST_AGE.remove(queue, reason)
        for (queue, reason), age in ages.items():
            m.GATED_OLDEST_AGE.labels(queue=queue, reason=reason).set(age)
        self._exported = set(ages)

    def _report(self, item: Gated) -> None:
        # No age in the text: the recorder sends a (reason, message) once per pod.
        self._record(item.pod, WARNING, EVENT_REASON,
                     f"still gated without a Workload after the {self._grace:.0f}s grace period: "
                     f"{why_no_workload(item, self._context(item.pod))}")
        # Whatever blocked the create may be gone: the next pass makes it if it can.
        self._requeue(item.pod)
