"""Stuck gates: how long the oldest gated pod has waited, per queue and why.

`gated(pods, facts_of, now)` sorts every gated pod into one of the verdict's
three reasons (`verdict.REASONS`) and ages it from its creation. `StuckGates`
runs it on the controller's caches every few seconds, exports the oldest age
per (namespace, queue, reason) as `raykueue_gated_pod_oldest_age_seconds`, and sends a
pod that has waited past the grace period without a Workload one Event saying
why (and queues it again, so that it gets one if nothing stands in the way).
The reason and the words are the verdict `raykueue explain` prints, on the
facts the controller's own pass reads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from raykueue.controller import actions as a
from raykueue.controller import metrics as m
from raykueue.controller import pods as p
from raykueue.controller import verdict as v
from raykueue.controller import workload as w
from raykueue.controller.facts import Facts
from raykueue.core.clock import parse_time
from raykueue.core.objects import Obj, metadata
from raykueue.kube.events import WARNING

log = logging.getLogger("raykueue.controller.stuck")

EVENT_REASON: Final = "GatedWithoutWorkload"


@dataclass(frozen=True, slots=True)
class Gated:
    pod: Obj
    queue: str  # "" when the pod has no queue (label or annotation, `workload.pod_queue`)
    reason: str  # one of verdict.REASONS
    age: float  # seconds since the pod was created
    facts: Facts | None = None  # what the reason was read from

    @property
    def namespace(self) -> str:
        """The pod's namespace: a LocalQueue's name means nothing without it."""
        return str(metadata(self.pod).get("namespace") or "")

    def why(self) -> str:
        """The verdict's sentence, in the controller's voice."""
        assert self.facts is not None
        found = v.verdict(self.facts)
        if isinstance(found.action, a.CreateWorkload):
            # Said by the controller itself, so not the verdict's "is the controller running?".
            return ("creating its Workload has not succeeded yet; the controller retries "
                    "(its log says why)")
        return found.text


def gated(pods: Iterable[Obj], facts_of: Callable[[Obj], Facts], now: float) -> list[Gated]:
    """Every pod still behind raykueue's gate, with why and for how long.

    Pods being deleted or already ended are not waiting for anything.
    """
    out: list[Gated] = []
    for pod in pods:
        if not p.is_gated(pod) or p.is_deleting(pod) or p.is_terminal(pod):
            continue
        facts = facts_of(pod)
        created = parse_time(metadata(pod).get("creationTimestamp"))
        age = max(now - created.timestamp(), 0.0) if created is not None else 0.0
        out.append(Gated(pod, w.pod_queue(pod) or "", v.reason(facts), age, facts))
    return out


def oldest(items: Iterable[Gated]) -> dict[tuple[str, str, str], float]:
    """(namespace, queue, reason) -> age of its oldest gated pod."""
    ages: dict[tuple[str, str, str], float] = {}
    for item in items:
        key = (item.namespace, item.queue, item.reason)
        ages[key] = max(ages.get(key, 0.0), item.age)
    return ages


def overdue(items: Iterable[Gated], grace_seconds: float) -> list[Gated]:
    """Pods past the grace period without a Workload and without a reason by design."""
    return [x for x in items if x.reason == v.NO_WORKLOAD and x.age >= grace_seconds]


class StuckGates:
    """Keeps the gauge current while this replica runs the controller.

    `sweep()` gathers what the controller's pass reads about each pod, at one
    moment (`Reader.sweep`); `record(pod, type, reason, message)` is its
    once-per-pod Event writer; `requeue(pod)` puts the pod back on its work queue.
    """

    def __init__(self, pods: Callable[[], list[Obj]], sweep: Callable[[], Callable[[Obj], Facts]],
                 *, grace_seconds: float, record: Callable[[Obj, str, str, str], None],
                 requeue: Callable[[Obj], None],
                 clock: Callable[[], float] = time.time) -> None:
        self._pods = pods
        self._sweep = sweep
        self._grace = grace_seconds
        self._record = record
        self._requeue = requeue
        self._clock = clock
        self._exported: set[tuple[str, str, str]] = set()

    def update(self) -> list[Gated]:
        items = gated(self._pods(), self._sweep(), self._clock())
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

    def _export(self, ages: Mapping[tuple[str, str, str], float]) -> None:
        for namespace, queue, reason in self._exported - set(ages):
            m.GATED_OLDEST_AGE.remove(namespace, queue, reason)
        for (namespace, queue, reason), age in ages.items():
            m.GATED_OLDEST_AGE.labels(namespace=namespace, queue=queue, reason=reason).set(age)
        self._exported = set(ages)

    def _report(self, item: Gated) -> None:
        # No age in the text: the recorder sends a (reason, message) once per pod.
        self._record(item.pod, WARNING, EVENT_REASON,
                     f"still gated without a Workload after the {self._grace:.0f}s grace period: "
                     f"{item.why()}")
        # Whatever blocked the create may be gone: the next pass makes it if it can.
        self._requeue(item.pod)
