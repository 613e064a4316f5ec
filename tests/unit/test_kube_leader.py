"""kube.leader: lease arithmetic, and the protocol against an in-memory Lease store."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kube.leader import (
    LeaderElector,
    claim,
    format_micro_time,
    lease_expired,
    parse_time,
    released,
)
from kube.rest import ApiError

T0 = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)


# -- pure pieces -----------------------------------------------------------------

def test_micro_time_round_trips() -> None:
    text = format_micro_time(T0)
    assert text == "2024-05-01T12:00:00.123456Z"
    assert parse_time(text) == T0
    assert parse_time("2024-05-01T12:00:00Z") == T0.replace(microsecond=0)
    assert parse_time("garbage") is None and parse_time(None) is None


def spec(holder: str | None, renewed: datetime | None, duration: int = 15) -> dict[str, Any]:
    out: dict[str, Any] = {"leaseDurationSeconds": duration}
    if holder is not None:
        out["holderIdentity"] = holder
    if renewed is not None:
        out["renewTime"] = format_micro_time(renewed)
    return out


def test_lease_expiry_is_renew_time_plus_duration() -> None:
    held = spec("a", T0, 15)
    assert not lease_expired(held, T0 + timedelta(seconds=14.9))
    assert not lease_expired(held, T0 + timedelta(seconds=15))
    assert lease_expired(held, T0 + timedelta(seconds=15, microseconds=1))


def test_lease_without_holder_or_times_is_free() -> None:
    assert lease_expired(spec(None, T0), T0)
    assert lease_expired(spec("", T0), T0)
    assert lease_expired(spec("a", None), T0)
    assert lease_expired({"holderIdentity": "a", "renewTime": format_micro_time(T0)}, T0)


def test_claim_renew_keeps_acquire_time_and_transitions() -> None:
    first = claim({}, "a", 15, T0)
    assert first["holderIdentity"] == "a" and first["leaseTransitions"] == 1
    later = T0 + timedelta(seconds=5)
    renewed = claim(first, "a", 15, later)
    assert renewed["acquireTime"] == first["acquireTime"]
    assert renewed["renewTime"] == format_micro_time(later)
    assert renewed["leaseTransitions"] == 1


def test_claim_takeover_bumps_transitions_and_acquire_time() -> None:
    held = {**claim({}, "a", 15, T0), "leaseTransitions": 4}
    later = T0 + timedelta(seconds=30)
    taken = claim(held, "b", 15, later)
    assert taken["holderIdentity"] == "b"
    assert taken["leaseTransitions"] == 5
    assert taken["acquireTime"] == taken["renewTime"] == format_micro_time(later)


def test_released_clears_holder_and_keeps_history() -> None:
    held = {**claim({}, "a", 15, T0), "leaseTransitions": 3}
    out = released(held, T0 + timedelta(seconds=1))
    assert "holderIdentity" not in out
    assert out["leaseTransitions"] == 3
    assert lease_expired(out, T0 + timedelta(seconds=1))


def test_timing_must_nest() -> None:
    with pytest.raises(ValueError):
        LeaderElector(FakeLeases(), "ns", "l", "a", lease_seconds=10, renew_seconds=10)  # type: ignore[arg-type]


# -- the protocol against a fake store ------------------------------------------------

class FakeLeases:
    """Leases with resourceVersion preconditions, like the API server."""

    def __init__(self) -> None:
        self.obj: dict[str, Any] | None = None
        self.rv = 0
        self.fail = False
        self.lock = threading.Lock()
        self.writes = 0

    def _check(self) -> None:
        if self.fail:
            raise ApiError(0, "ConnectionRefusedError")

    def get(self, path: str, query: Any = None, *, timeout: Any = None) -> dict[str, Any]:
        self._check()
        with self.lock:
            if self.obj is None:
                raise ApiError(404, "NotFound")
            return copy.deepcopy(self.obj)

    def create(self, path: str, body: dict[str, Any], query: Any = None, *,
               timeout: Any = None) -> dict[str, Any]:
        self._check()
        with self.lock:
            if self.obj is not None:
                raise ApiError(409, "AlreadyExists")
            return self._store(body)

    def replace(self, path: str, body: dict[str, Any], *, timeout: Any = None) -> dict[str, Any]:
        self._check()
        with self.lock:
            assert self.obj is not None
            if body["metadata"].get("resourceVersion") != self.obj["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict")
            return self._store(body)

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        self.writes += 1
        self.obj = copy.deepcopy(body)
        self.obj["metadata"]["resourceVersion"] = str(self.rv)
        return copy.deepcopy(self.obj)

    @property
    def spec(self) -> dict[str, Any]:
        assert self.obj is not None
        return self.obj["spec"]


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def elector(store: FakeLeases, identity: str, clock: Callable[[], datetime] | None = None,
            **timing: float) -> LeaderElector:
    kw = {"lease_seconds": 15, "renew_seconds": 10, "retry_seconds": 2, **timing}
    return LeaderElector(store, "kube-system", "lock", identity,  # type: ignore[arg-type]
                         clock=clock or Clock(), **kw)  # type: ignore[arg-type]


def test_first_candidate_creates_lease() -> None:
    store = FakeLeases()
    assert elector(store, "a").try_acquire_or_renew()
    assert store.spec["holderIdentity"] == "a"
    assert store.spec["leaseDurationSeconds"] == 15
    assert store.spec["leaseTransitions"] == 0
    assert store.obj is not None and store.obj["kind"] == "Lease"


def test_second_candidate_waits_until_expiry_then_takes_over() -> None:
    store, clock = FakeLeases(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert a.try_acquire_or_renew()
    clock.now = T0 + timedelta(seconds=10)
    assert not b.try_acquire_or_renew()
    assert a.try_acquire_or_renew()  # renews at +10
    clock.now = T0 + timedelta(seconds=24)
    assert not b.try_acquire_or_renew()  # 14s after the renewal: still held
    clock.now = T0 + timedelta(seconds=26)
    assert b.try_acquire_or_renew()
    assert store.spec["holderIdentity"] == "b"
    assert store.spec["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew()  # the old leader sees b's fresh claim


def test_stale_write_loses_to_concurrent_writer() -> None:
    store, clock = FakeLeases(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert a.try_acquire_or_renew()
    clock.now = T0 + timedelta(seconds=60)
    stale = store.get("")
    assert b.try_acquire_or_renew()
    stale["spec"] = claim(stale["spec"], "c", 15, clock.now)
    with pytest.raises(ApiError) as info:
        store.replace("", stale)
    assert info.value.is_conflict


def test_release_hands_over_at_once() -> None:
    store, clock = FakeLeases(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert a.try_acquire_or_renew()
    assert a.release()
    assert b.try_acquire_or_renew()  # same instant, no waiting for expiry
    assert not a.release()  # no longer ours: untouched
    assert store.spec["holderIdentity"] == "b"


def test_run_leads_then_releases_on_stop() -> None:
    store = FakeLeases()
    a = elector(store, "a", lease_seconds=3, renew_seconds=1, retry_seconds=0.05)
    stop = threading.Event()
    started, lost_seen = threading.Event(), threading.Event()

    def work(lost: threading.Event) -> None:
        started.set()
        lost.wait()
        lost_seen.set()

    runner = threading.Thread(target=a.run, args=(work, stop), daemon=True)
    runner.start()
    assert started.wait(2) and a.is_leader
    writes = store.writes
    time.sleep(0.3)
    assert store.writes > writes  # it keeps renewing
    stop.set()
    runner.join(3)
    assert not runner.is_alive()
    assert lost_seen.is_set() and not a.is_leader
    assert "holderIdentity" not in store.spec


def test_run_steps_down_when_renewals_fail_past_deadline() -> None:
    store = FakeLeases()
    a = elector(store, "a", lease_seconds=3, renew_seconds=0.4, retry_seconds=0.05)
    stop = threading.Event()
    lost_events: list[threading.Event] = []
    started = threading.Semaphore(0)

    def work(lost: threading.Event) -> None:
        lost_events.append(lost)
        started.release()
        lost.wait()

    runner = threading.Thread(target=a.run, args=(work, stop), daemon=True)
    runner.start()
    assert started.acquire(timeout=2)
    store.fail = True
    began = time.monotonic()
    assert lost_events[0].wait(2)
    assert 0.2 < time.monotonic() - began < 1.5
    assert not a.is_leader
    # The record still names us, so once the API is back we lead again,
    # with a fresh lost event.
    store.fail = False
    assert started.acquire(timeout=2)
    assert len(lost_events) == 2 and not lost_events[1].is_set()
    stop.set()
    runner.join(3)
    assert lost_events[1].is_set()


def test_two_runners_never_lead_together_and_fail_over() -> None:
    store = FakeLeases()
    timing = {"lease_seconds": 1, "renew_seconds": 0.6, "retry_seconds": 0.05}
    wall = lambda: datetime.now(UTC)  # noqa: E731
    a, b = elector(store, "a", wall, **timing), elector(store, "b", wall, **timing)
    stop_a, stop_b = threading.Event(), threading.Event()
    overlap: list[bool] = []
    leaders: list[str] = []

    def watcher() -> None:
        while not stop_b.is_set():
            overlap.append(a.is_leader and b.is_leader)
            time.sleep(0.005)

    def work(name: str) -> Any:
        def run(lost: threading.Event) -> None:
            leaders.append(name)
            lost.wait()
        return run

    threads = [threading.Thread(target=a.run, args=(work("a"), stop_a), daemon=True),
               threading.Thread(target=b.run, args=(work("b"), stop_b), daemon=True),
               threading.Thread(target=watcher, daemon=True)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 3
    while not leaders and time.monotonic() < deadline:
        time.sleep(0.01)
    first = leaders[0]
    (stop_a if first == "a" else stop_b).set()
    deadline = time.monotonic() + 3
    while len(leaders) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert leaders[:2] == [first, "b" if first == "a" else "a"]
    stop_a.set()
    stop_b.set()
    for t in threads:
        t.join(3)
    assert not any(overlap)
