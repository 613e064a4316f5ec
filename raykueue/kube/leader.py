"""Leader election on a coordination.k8s.io/v1 Lease.

Same protocol as client-go's leaderelection, so tools that read Leases (and
`kubectl get lease`) show the truth: the holder renews `renewTime` every
`retry_seconds`; every write carries the resourceVersion it read, so two
candidates cannot both win the same round.

Expiry is judged as client-go judges it: by how long this process has seen
the Lease record unchanged on its own monotonic clock, never by comparing
the holder's `renewTime` with the local wall clock. Clocks that disagree
between nodes then neither let a candidate take a live leader's Lease (its
clock ahead) nor keep it waiting on a dead one (its clock behind).

A leader that cannot renew for `renew_seconds` steps down by itself, before
the `lease_seconds` after which others may take over. A leader whose work
ends by itself (the callback raised, or returned while still leading) steps
down too and releases the Lease, so another replica leads at once, and this
one campaigns again only after a backoff: holding the Lease with nothing
running would stop every replica from doing the work.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from raykueue.core.clock import format_micro_time
from raykueue.kube.backoff import Backoff
from raykueue.kube.resources import LEASES
from raykueue.kube.rest import ApiError, Rest

log = logging.getLogger(__name__)

OnStarted = Callable[[threading.Event], None]
Monotonic = Callable[[], float]

# The Lease fields a holder changes when it renews: a record is "unchanged"
# while all of them are.
_RECORD_FIELDS = ("holderIdentity", "leaseDurationSeconds", "acquireTime", "renewTime",
                  "leaseTransitions")



@dataclass(frozen=True, slots=True)
class Observation:
    """A Lease record as read, and when (monotonic) this process first saw it so."""

    record: tuple[Any, ...]
    since: float

    @property
    def holder(self) -> str:
        return str(self.record[0] or "")

    @property
    def duration(self) -> Any:
        return self.record[1]


def observe(previous: Observation | None, spec: Mapping[str, Any], now: float) -> Observation:
    """The observation after reading `spec` at monotonic `now`."""
    record = tuple(spec.get(name) for name in _RECORD_FIELDS)
    if previous is not None and previous.record == record:
        return previous
    return Observation(record, now)


def lease_expired(observed: Observation, now: float) -> bool:
    """Whether the holder's claim has lapsed: unchanged for longer than its duration."""
    if not observed.holder:
        return True
    duration = observed.duration
    if not isinstance(duration, int) or duration <= 0:
        return True
    return observed.since + duration < now


def claim(spec: Mapping[str, Any], identity: str, lease_seconds: int,
          now: datetime) -> dict[str, Any]:
    """The Lease spec after `identity` acquires or renews it at `now`."""
    stamp = format_micro_time(now)
    transitions = spec.get("leaseTransitions")
    transitions = transitions if isinstance(transitions, int) else 0
    if spec.get("holderIdentity") == identity:
        acquired = spec.get("acquireTime") or stamp
    else:
        acquired = stamp
        transitions += 1
    return {
        "holderIdentity": identity,
        "leaseDurationSeconds": lease_seconds,
        "acquireTime": acquired,
        "renewTime": stamp,
        "leaseTransitions": transitions,
    }


def released(spec: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """The Lease spec a leader leaves behind when it steps down on purpose."""
    out = dict(spec)
    out.pop("holderIdentity", None)
    # One second rather than zero: the API rejects non-positive durations, and
    # client-go candidates (which ignore an empty holder's duration) take over
    # at once either way.
    out["leaseDurationSeconds"] = 1
    out["renewTime"] = format_micro_time(now)
    return out


def run_term(on_started: OnStarted, lost: threading.Event) -> str | None:
    """Run one term's work; why it ended by itself, or None if it ended because `lost` was set."""
    try:
        on_started(lost)
    except Exception as exc:
        log.exception("leader callback failed")
        return f"{type(exc).__name__}: {exc}"
    if lost.is_set():
        return None
    return "leader callback returned while still leading"


class FailedTerms:
    """After a term whose work ended by itself: say why, and wait a growing backoff.

    `reason` is set for as long as that wait lasts, so readiness can report a
    replica that is not leading because its work failed.
    """

    def __init__(self, backoff: Backoff) -> None:
        self.backoff = backoff
        self.reason: str | None = None

    def ended(self, reason: str | None, lasted: float, stop: threading.Event) -> None:
        # A term that ran for longer than the longest wait is a fresh failure,
        # not one more of a series.
        if reason is None or lasted >= self.backoff.cap:
            self.backoff.reset()
        if reason is None or stop.is_set():
            return
        delay = self.backoff.next()
        self.reason = reason
        log.error("leader work ended by itself (%s); campaigning again in %.1fs", reason, delay)
        try:
            stop.wait(delay)
        finally:
            self.reason = None


def failure_backoff(retry_seconds: float) -> Backoff:
    return Backoff(initial=retry_seconds, cap=max(60.0, retry_seconds))


class LeaderElector:
    """Campaign for a Lease until told to stop; see the module docstring."""

    def __init__(self, rest: Rest, namespace: str, name: str, identity: str, *,
                 lease_seconds: int = 15, renew_seconds: float = 10,
                 retry_seconds: float = 2,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 monotonic: Monotonic = time.monotonic,
                 failures: Backoff | None = None) -> None:
        if not 0 < retry_seconds < renew_seconds < lease_seconds:
            raise ValueError("need 0 < retry_seconds < renew_seconds < lease_seconds")
        self._rest = rest
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_seconds = int(lease_seconds)
        self.renew_seconds = renew_seconds
        self.retry_seconds = retry_seconds
        # Wall time only for the stamps others read; every judgement uses monotonic.
        self._clock = clock
        self._monotonic = monotonic
        self._path = LEASES.path(namespace, name)
        # A round is a read and a write; bounding each keeps a round that
        # _hold gave up on from lingering, and a candidate's rounds short.
        self._timeout = max(0.5, (self.lease_seconds - renew_seconds) / 2)
        # Jitter spreads candidates that started together; factor 1: a
        # candidate retries at a steady pace, however long another leads.
        self._retry = Backoff(initial=retry_seconds, cap=retry_seconds * 1.2, factor=1.0)
        self._failed = FailedTerms(failures or failure_backoff(retry_seconds))
        self._observed: Observation | None = None
        self._leading = False
        self._wake = threading.Event()

    @property
    def is_leader(self) -> bool:
        return self._leading

    @property
    def failure(self) -> str | None:
        """Why this replica is backing off instead of campaigning: its last term's work failed."""
        return self._failed.reason

    def run(self, on_started: OnStarted, stop: threading.Event) -> None:
        """Block until `stop` is set, leading whenever the Lease is ours.

        Each time leadership is gained, `on_started(lost)` runs in a new
        thread; `lost` is set when leadership ends (renewal failed for
        `renew_seconds`, or `stop`). If `on_started` raises or returns before
        `lost` is set, leadership ends too: the Lease is released and this
        replica campaigns again after a backoff. On `stop` the worker gets up
        to `renew_seconds` to wind down before the Lease is released, so a
        successor never overlaps with it.
        """
        # One waiter turns `stop` into a wake-up for _hold, which also wakes
        # when the work ends by itself.
        threading.Thread(target=_set_when, args=(stop, self._wake),
                         name=f"lease-stop-{self.name}", daemon=True).start()
        while not stop.is_set():
            started = self._monotonic()
            acquired = self.try_acquire_or_renew()
            if not acquired or self._monotonic() - started >= self.renew_seconds:
                # A round that took longer than the renew deadline proves
                # nothing about now; the next one (a quick renew) decides.
                stop.wait(self._retry.next())
                continue
            reason = self._term(on_started, stop, started)
            self._failed.ended(reason, self._monotonic() - started, stop)

    def _term(self, on_started: OnStarted, stop: threading.Event, started: float) -> str | None:
        """Lead until the Lease is lost, `stop`, or the work ends; why it ended by itself."""
        lost = threading.Event()
        outcome: list[str | None] = []

        def work() -> None:
            outcome.append(run_term(on_started, lost))
            self._wake.set()

        worker = threading.Thread(target=work, name=f"leader-{self.name}", daemon=True)
        self._wake.clear()
        if stop.is_set():  # its wake-up may just have been cleared
            self._wake.set()
        self._leading = True
        log.info("lease %s/%s: %s became leader", self.namespace, self.name, self.identity)
        worker.start()
        self._hold(stop, started, ended=lambda: bool(outcome))
        self._leading = False
        lost.set()
        if not stop.is_set() and not outcome:
            log.warning("lease %s/%s: %s lost leadership", self.namespace, self.name,
                        self.identity)
        self._wait_worker(worker, stop)
        reason = outcome[0] if outcome else None
        if stop.is_set() or reason is not None:
            self.release()
        return reason

    def _hold(self, stop: threading.Event, last_ok: float, ended: Callable[[], bool]) -> None:
        """Renew until stop, the work ends, or no renewal has succeeded for renew_seconds.

        Leadership counts from the start of the last successful round (the
        renewTime others see is taken after it), and a round that hangs past
        the deadline is abandoned rather than awaited: request timeouts alone
        do not bound it, since the HTTP layer may retry.
        """
        while True:
            remaining = last_ok + self.renew_seconds - self._monotonic()
            if remaining <= 0:
                return
            self._wake.wait(min(self.retry_seconds, remaining))
            if stop.is_set() or ended():
                return
            started = self._monotonic()
            remaining = last_ok + self.renew_seconds - started
            if remaining <= 0:
                return
            if self._round_within(remaining):
                last_ok = started

    def _round_within(self, seconds: float) -> bool:
        outcome: list[bool] = []
        attempt = threading.Thread(
            target=lambda: outcome.append(self.try_acquire_or_renew()),
            name=f"lease-renew-{self.name}", daemon=True)
        attempt.start()
        attempt.join(seconds)
        return bool(outcome and outcome[0])

    def _wait_worker(self, worker: threading.Thread, stop: threading.Event) -> None:
        # Campaigning again while the old worker still runs could put two
        # workers of this process side by side; on stop, bound the wait.
        while worker.is_alive():
            if stop.is_set():
                worker.join(self.renew_seconds)
                if worker.is_alive():
                    log.warning("lease %s/%s: leader callback ignored the lost event",
                                self.namespace, self.name)
                return
            worker.join(self.retry_seconds)

    def try_acquire_or_renew(self) -> bool:
        """One round: True if we hold the Lease afterwards."""
        now = self._clock()
        try:
            lease = self._rest.get(self._path, timeout=self._timeout)
        except ApiError as exc:
            if not exc.is_not_found:
                log.warning("lease %s/%s: read failed: %s", self.namespace, self.name, exc)
                return False
            return self._create(now)
        spec = lease.get("spec") or {}
        self._observed = observe(self._observed, spec, self._monotonic())
        holder = spec.get("holderIdentity")
        if holder and holder != self.identity and not lease_expired(self._observed,
                                                                    self._monotonic()):
            return False
        lease["spec"] = claim(spec, self.identity, self.lease_seconds, now)
        return self._update(lease)

    def release(self) -> bool:
        """Give the Lease up if we still hold it; True if it was released."""
        try:
            lease = self._rest.get(self._path, timeout=self._timeout)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return False
            lease["spec"] = released(spec, self._clock())
            self._rest.replace(self._path, lease, timeout=self._timeout)
        except ApiError as exc:
            log.warning("lease %s/%s: release failed: %s", self.namespace, self.name, exc)
            return False
        log.info("lease %s/%s: %s released", self.namespace, self.name, self.identity)
        return True

    def _create(self, now: datetime) -> bool:
        body = {
            "apiVersion": LEASES.api_version,
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": claim({"leaseTransitions": -1}, self.identity, self.lease_seconds, now),
        }
        try:
            self._rest.create(LEASES.path(self.namespace), body, timeout=self._timeout)
        except ApiError as exc:
            if not exc.is_already_exists:
                log.warning("lease %s/%s: create failed: %s", self.namespace, self.name, exc)
            return False
        return True

    def _update(self, lease: dict[str, Any]) -> bool:
        # The body still carries the resourceVersion we read: a concurrent
        # writer makes this a 409 instead of a silent overwrite.
        try:
            self._rest.replace(self._path, lease, timeout=self._timeout)
        except ApiError as exc:
            if not exc.is_conflict:
                log.warning("lease %s/%s: update failed: %s", self.namespace, self.name, exc)
            return False
        return True


def _set_when(source: threading.Event, target: threading.Event) -> None:
    source.wait()
    target.set()
