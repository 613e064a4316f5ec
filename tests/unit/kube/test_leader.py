"""kube.leader: lease arithmetic, and the protocol against an in-memory Lease store."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from raykueue.core.clock import format_micro_time, parse_time
from raykueue.kube.backoff import Backoff
from raykueue.kube.leader import (
    LeaderElector,
    Observation,
    claim,
    lease_expired,
    observe,
    released,
)
from raykueue.kube.resources import LEASES
from raykueue.kube.rest import ApiError
from testkit.fakeapi import FakeApi
from testkit.waiting import wait_for, within

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


def test_lease_expiry_is_observed_time_plus_duration() -> None:
    held = observe(None, spec("a", T0, 15), 100.0)
    assert not lease_expired(held, 114.9)
    assert not lease_expired(held, 115.0)
    assert lease_expired(held, 115.000001)


def test_a_changed_record_restarts_the_observation() -> None:
    first = observe(None, spec("a", T0, 15), 100.0)
    assert observe(first, spec("a", T0, 15), 110.0) is first  # unchanged: time keeps running
    renewed = observe(first, spec("a", T0 + timedelta(seconds=2), 15), 110.0)
    assert renewed.since == 110.0
    assert not lease_expired(renewed, 120.0) and lease_expired(first, 120.0)


def test_lease_without_holder_or_duration_is_free() -> None:
    assert lease_expired(observe(None, spec(None, T0), 0.0), 0.0)
    assert lease_expired(observe(None, spec("", T0), 0.0), 0.0)
    assert lease_expired(observe(None, {"holderIdentity": "a",
                                        "renewTime": format_micro_time(T0)}, 0.0), 0.0)
    assert lease_expired(Observation(("a", 0, None, None, None), 0.0), 0.0)


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
    assert lease_expired(observe(None, out, 0.0), 0.0)


def test_timing_must_nest() -> None:
    with pytest.raises(ValueError):
        LeaderElector(leases(), "ns", "l", "a", lease_seconds=10, renew_seconds=10)  # type: ignore[arg-type]


# -- the protocol against a fake store ------------------------------------------------

LEASE = LEASES.path("kube-system", "lock")


def leases() -> FakeApi:
    """The one fake API (resourceVersion preconditions as the API server's), serving Leases."""
    return FakeApi([LEASES])


def held(store: FakeApi) -> dict[str, Any]:
    """The stored Lease's spec, read as no client (unrecorded, never failing)."""
    return store.objects[LEASE]["spec"]


class Clock:
    """A wall clock, and a monotonic one that advances with it from `skew` on."""

    def __init__(self, skew: timedelta = timedelta()) -> None:
        self.now = T0
        self.skew = skew

    def __call__(self) -> datetime:
        return self.now + self.skew

    def monotonic(self) -> float:
        return (self.now - T0).total_seconds()


def elector(store: FakeApi, identity: str, clock: Callable[[], datetime] | None = None,
            **timing: float) -> LeaderElector:
    kw: dict[str, Any] = {"lease_seconds": 15, "renew_seconds": 10, "retry_seconds": 2, **timing}
    if isinstance(clock, Clock):
        # Tests that step a Clock step the monotonic time it implies too;
        # running electors keep the real monotonic clock for their deadlines.
        kw["monotonic"] = clock.monotonic
    return LeaderElector(store, "kube-system", "lock", identity,  # type: ignore[arg-type]
                         clock=clock or Clock(), **kw)


def test_first_candidate_creates_lease() -> None:
    store = leases()
    assert elector(store, "a").try_acquire_or_renew()
    assert held(store)["holderIdentity"] == "a"
    assert held(store)["leaseDurationSeconds"] == 15
    assert held(store)["leaseTransitions"] == 0
    assert store.objects[LEASE]["kind"] == "Lease"


def test_second_candidate_waits_until_expiry_then_takes_over() -> None:
    store, clock = leases(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert a.try_acquire_or_renew()
    clock.now = T0 + timedelta(seconds=10)
    assert not b.try_acquire_or_renew()
    assert a.try_acquire_or_renew()  # renews at +10
    clock.now = T0 + timedelta(seconds=24)
    assert not b.try_acquire_or_renew()  # b first sees the renewal at +24: held until +39
    clock.now = T0 + timedelta(seconds=38)
    assert not b.try_acquire_or_renew()  # 14s after b saw it: still held
    clock.now = T0 + timedelta(seconds=40)
    assert b.try_acquire_or_renew()
    assert held(store)["holderIdentity"] == "b"
    assert held(store)["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew()  # the old leader sees b's fresh claim


@pytest.mark.parametrize("skew_hours", [1, -1])
def test_expiry_ignores_skewed_wall_clocks(skew_hours: int) -> None:
    """b's wall clock is an hour off a's: b still waits one lease, and no more.

    Judged by renewTime against b's clock, b would take a live lease at once
    (clock ahead) or wait an hour for a dead one (clock behind).
    """
    store, clock_a = leases(), Clock()
    clock_b = Clock(skew=timedelta(hours=skew_hours))
    a, b = elector(store, "a", clock_a), elector(store, "b", clock_b)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # a lease just renewed is a's
    for seconds in (5, 10, 15):  # a renews every 5s: never b's
        clock_a.now = clock_b.now = T0 + timedelta(seconds=seconds)
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
    # a dies after renewing at +15; b saw that record first at +15.
    clock_b.now = T0 + timedelta(seconds=30)
    assert not b.try_acquire_or_renew()
    clock_b.now = T0 + timedelta(seconds=31)
    assert b.try_acquire_or_renew()
    assert held(store)["holderIdentity"] == "b"


def test_stale_write_loses_to_concurrent_writer() -> None:
    store, clock = leases(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # b's first sight of a's record
    clock.now = T0 + timedelta(seconds=60)
    stale = store.get(LEASE)
    assert b.try_acquire_or_renew()
    stale["spec"] = claim(stale["spec"], "c", 15, clock.now)
    with pytest.raises(ApiError) as info:
        store.replace(LEASE, stale)
    assert info.value.is_conflict


def test_release_hands_over_at_once() -> None:
    store, clock = leases(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert a.try_acquire_or_renew()
    assert a.release()
    assert b.try_acquire_or_renew()  # same instant, no waiting for expiry
    assert not a.release()  # no longer ours: untouched
    assert held(store)["holderIdentity"] == "b"


def test_run_leads_then_releases_on_stop() -> None:
    store = leases()
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
    writes = len(store.writes())
    wait_for(lambda: len(store.writes()) > writes + 1, timeout=within(1), message="renewals")
    stop.set()
    runner.join(3)
    assert not runner.is_alive()
    assert lost_seen.is_set() and not a.is_leader
    assert "holderIdentity" not in held(store)


def test_run_steps_down_when_renewals_fail_past_deadline() -> None:
    store = leases()
    # A long lease: stepping down must come after the renew deadline and before
    # anyone else could take the Lease, and the gap between the two is wide.
    lease, renew, retry = 10, 0.4, 0.05
    a = elector(store, "a", lease_seconds=lease, renew_seconds=renew, retry_seconds=retry)
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
    store.unreachable()
    began = time.monotonic()
    assert lost_events[0].wait(lease)
    assert renew - retry < time.monotonic() - began < lease
    assert not a.is_leader
    # The record still names us, so once the API is back we lead again,
    # with a fresh lost event.
    store.reachable()
    assert started.acquire(timeout=2)
    assert len(lost_events) == 2 and not lost_events[1].is_set()
    stop.set()
    runner.join(3)
    assert lost_events[1].is_set()


def test_two_runners_never_lead_together_and_fail_over() -> None:
    store = leases()
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
    wait_for(lambda: leaders, timeout=within(timing["retry_seconds"]), message="a leader")
    first = leaders[0]
    (stop_a if first == "a" else stop_b).set()
    wait_for(lambda: len(leaders) >= 2, timeout=within(timing["lease_seconds"]),
             message="the other takes over")
    assert leaders[:2] == [first, "b" if first == "a" else "a"]
    stop_a.set()
    stop_b.set()
    for t in threads:
        t.join(3)
    assert not any(overlap)


FAST_FAILURES = {"lease_seconds": 3, "renew_seconds": 1, "retry_seconds": 0.05}


@pytest.mark.parametrize("ending", ["raises", "returns"])
def test_work_that_ends_by_itself_ends_leadership_and_retries_after_backoff(ending: str) -> None:
    store = leases()
    wall = lambda: datetime.now(UTC)  # noqa: E731
    released_when_failed: list[bool] = []

    class Observed(Backoff):
        # The failure's backoff is taken the moment before the failure is reported:
        # the Lease must be free by then.
        def next(self) -> float:
            released_when_failed.append("holderIdentity" not in held(store) and not a.is_leader)
            return super().next()

    a = elector(store, "a", wall, failures=Observed(initial=0.3, cap=0.3, jitter=0),
                **FAST_FAILURES)
    stop = threading.Event()
    terms: list[threading.Event] = []

    def work(lost: threading.Event) -> None:
        terms.append(lost)
        if len(terms) == 1:
            if ending == "raises":
                raise RuntimeError("controller could not start")
            return
        lost.wait()

    runner = threading.Thread(target=a.run, args=(work, stop), daemon=True)
    runner.start()
    try:
        wait_for(lambda: a.failure is not None, timeout=5, interval=0.01,
                 message="a reports its failed term")
        assert ("RuntimeError" in a.failure) if ending == "raises" else ("returned" in a.failure)
        wait_for(lambda: len(terms) == 2 and a.is_leader, timeout=5,
                 message="a campaigns again after the backoff and leads")
        assert a.failure is None
        assert held(store)["holderIdentity"] == "a"
    finally:
        stop.set()
        runner.join(3)
    assert released_when_failed and all(released_when_failed)


def test_a_failed_leader_hands_over_at_once() -> None:
    store = leases()
    wall = lambda: datetime.now(UTC)  # noqa: E731
    # a backs off far longer than the test, and its lease would last a minute:
    # b can only lead because a released the Lease.
    timing = {"lease_seconds": 60, "renew_seconds": 1, "retry_seconds": 0.05}
    a = elector(store, "a", wall, failures=Backoff(initial=30, cap=30, jitter=0), **timing)
    b = elector(store, "b", wall, **timing)
    stop = threading.Event()

    def broken(lost: threading.Event) -> None:
        raise RuntimeError("boom")

    def fine(lost: threading.Event) -> None:
        lost.wait()

    ta = threading.Thread(target=a.run, args=(broken, stop), daemon=True)
    ta.start()
    wait_for(lambda: a.failure is not None, timeout=5, message="a's term fails")
    tb = threading.Thread(target=b.run, args=(fine, stop), daemon=True)
    tb.start()
    try:
        wait_for(lambda: b.is_leader, timeout=5, message="b leads the released lease")
        assert a.failure is not None and not a.is_leader
    finally:
        stop.set()
        ta.join(3)
        tb.join(3)
    assert not ta.is_alive() and not tb.is_alive()
