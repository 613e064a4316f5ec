"""Leader election on a coordination.k8s.io/v1 Lease.

Same protocol as client-go's leaderelection, so tools that read Leases (and
`kubectl get lease`) show the truth: the holder renews `renewTime` every
`retry_seconds`; anyone may take the Lease once `renewTime +
leaseDurationSeconds` has passed; every write carries the resourceVersion it
read, so two candidates cannot both win the same round.

A leader that cannot renew for `renew_seconds` steps down by itself, before
the `lease_seconds` after which others may take over, so there is never a
moment where both think they lead (given clocks that roughly agree).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from kube.resources import LEASES
from kube.rest import ApiError, Rest

log = logging.getLogger(__name__)

OnStarted = Callable[[threading.Event], None]


def format_micro_time(moment: datetime) -> str:
    """RFC 3339 with microseconds, as the API's MicroTime expects."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def lease_expired(spec: Mapping[str, Any], now: datetime) -> bool:
    """Whether the current holder's claim has lapsed at `now`."""
    if not spec.get("holderIdentity"):
        return True
    renewed = parse_time(spec.get("renewTime")) or parse_time(spec.get("acquireTime"))
    if renewed is None:
        return True
    duration = spec.get("leaseDurationSeconds")
    if not isinstance(duration, int) or duration <= 0:
        return True
    return renewed + timedelta(seconds=duration) < now


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


class LeaderElector:
    """Campaign for a Lease until told to stop; see the module docstring."""

    def __init__(self, rest: Rest, namespace: str, name: str, identity: str, *,
                 lease_seconds: int = 15, renew_seconds: float = 10,
                 retry_seconds: float = 2,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        if not 0 < retry_seconds < renew_seconds < lease_seconds:
            raise ValueError("need 0 < retry_seconds < renew_seconds < lease_seconds")
        self._rest = rest
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_seconds = int(lease_seconds)
        self.renew_seconds = renew_seconds
        self.retry_seconds = retry_seconds
        self._clock = clock
        self._path = LEASES.path(namespace, name)
        # A round is a read and a write; bounding each keeps a round that
        # _hold gave up on from lingering, and a candidate's rounds short.
        self._timeout = max(0.5, (self.lease_seconds - renew_seconds) / 2)
        self._leading = False

    @property
    def is_leader(self) -> bool:
        return self._leading

    def run(self, on_started: OnStarted, stop: threading.Event) -> None:
        """Block until `stop` is set, leading whenever the Lease is ours.

        Each time leadership is gained, `on_started(lost)` runs in a new
        thread; `lost` is set when leadership ends (renewal failed for
        `renew_seconds`, or `stop`). On `stop` the worker gets up to
        `renew_seconds` to wind down before the Lease is released, so a
        successor never overlaps with it.
        """
        while not stop.is_set():
            started = time.monotonic()
            acquired = self.try_acquire_or_renew()
            if not acquired or time.monotonic() - started >= self.renew_seconds:
                # A round that took longer than the renew deadline proves
                # nothing about now; the next one (a quick renew) decides.
                # Jitter spreads candidates that started together.
                stop.wait(self.retry_seconds * (1.0 + 0.2 * random.random()))
                continue
            lost = threading.Event()
            worker = threading.Thread(target=self._work, args=(on_started, lost),
                                      name=f"leader-{self.name}", daemon=True)
            self._leading = True
            log.info("lease %s/%s: %s became leader", self.namespace, self.name, self.identity)
            worker.start()
            self._hold(stop, started)
            self._leading = False
            lost.set()
            if not stop.is_set():
                log.warning("lease %s/%s: %s lost leadership", self.namespace, self.name,
                            self.identity)
            self._wait_worker(worker, stop)
            if stop.is_set():
                self.release()

    def _hold(self, stop: threading.Event, last_ok: float) -> None:
        """Renew until stop, or until no renewal has succeeded for renew_seconds.

        Leadership counts from the start of the last successful round (the
        renewTime others see is taken after it), and a round that hangs past
        the deadline is abandoned rather than awaited: request timeouts alone
        do not bound it, since the HTTP layer may retry.
        """
        while True:
            remaining = last_ok + self.renew_seconds - time.monotonic()
            if remaining <= 0 or stop.wait(min(self.retry_seconds, remaining)):
                return
            started = time.monotonic()
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

    def _work(self, on_started: OnStarted, lost: threading.Event) -> None:
        try:
            on_started(lost)
        except Exception:
            log.exception("lease %s/%s: leader callback failed", self.namespace, self.name)

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
        holder = spec.get("holderIdentity")
        if holder and holder != self.identity and not lease_expired(spec, now):
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
