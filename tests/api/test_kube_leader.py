"""kube.leader.LeaderElector against a real Lease on the API server."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from raykueue.core.clock import parse_time
from raykueue.kube.backoff import Backoff
from raykueue.kube.leader import LeaderElector, lease_expired, observe
from raykueue.kube.resources import LEASES
from raykueue.kube.rest import Rest
from testkit.waiting import holds_for, wait_for, within

FAST = {"lease_seconds": 3, "renew_seconds": 2, "retry_seconds": 0.2}


@pytest.fixture
def rest(k8s) -> Rest:
    return Rest(k8s)


class Candidate:
    """An elector running in a thread, recording when it led."""

    def __init__(self, rest: Rest, ns: str, identity: str,
                 work: Callable[[threading.Event], None] | None = None,
                 **timing: Any) -> None:
        self.elector = LeaderElector(rest, ns, "lock", identity,  # type: ignore[arg-type]
                                     **{**FAST, **timing})
        self.stop = threading.Event()
        self.terms: list[threading.Event] = []
        self._work = work or (lambda lost: lost.wait())
        self.thread = threading.Thread(target=self.elector.run, args=(self._lead, self.stop),
                                       daemon=True)

    def _lead(self, lost: threading.Event) -> None:
        self.terms.append(lost)
        self._work(lost)

    def start(self) -> Candidate:
        self.thread.start()
        return self

    def halt(self) -> None:
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive()


@pytest.fixture
def candidates(rest: Rest, new_namespace) -> Iterator[tuple[str, list[Candidate]]]:
    ns = new_namespace("kube-leader")
    made: list[Candidate] = []
    yield ns, made
    for c in made:
        c.stop.set()
    for c in made:
        c.thread.join(10)


def lease(rest: Rest, ns: str) -> dict[str, Any]:
    return rest.get(LEASES.path(ns, "lock"))["spec"]


def test_one_leader_among_two_and_handover_on_stop(rest: Rest, candidates) -> None:
    ns, made = candidates
    a, b = Candidate(rest, ns, "a"), Candidate(rest, ns, "b")
    made += [a, b]
    a.start()
    wait_for(lambda: a.elector.is_leader, timeout=10, message="a leads")
    b.start()
    spec = lease(rest, ns)
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 3
    assert parse_time(spec["renewTime"]) is not None  # the server kept our MicroTime

    # b keeps trying for longer than a lease lasts, and never wins while a renews.
    # Asserting "never" takes watching for a while.
    first_renew = spec["renewTime"]
    assert holds_for(lambda: a.elector.is_leader and not b.elector.is_leader,
                     FAST["lease_seconds"] + 1, interval=0.05)
    assert lease(rest, ns)["renewTime"] != first_renew
    assert not b.terms

    a.halt()
    assert a.terms[0].is_set() and not a.elector.is_leader
    # Released, not left to expire: the record no longer names a (b may have taken
    # it already at its next retry), so no one waits out a's lease.
    assert lease(rest, ns).get("holderIdentity") in (None, "b")
    wait_for(lambda: b.elector.is_leader, timeout=within(FAST["retry_seconds"]),
             message="b takes over a released lease")
    spec = lease(rest, ns)
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] >= 1


def test_takeover_after_a_holder_vanishes(rest: Rest, candidates) -> None:
    ns, made = candidates
    # A holder that acquires once and then dies without releasing.
    ghost = LeaderElector(rest, ns, "lock", "ghost", **FAST)  # type: ignore[arg-type]
    assert ghost.try_acquire_or_renew()
    b = Candidate(rest, ns, "b").start()
    made.append(b)
    wait_for(lambda: b.elector.is_leader,
             timeout=within(FAST["lease_seconds"] + FAST["retry_seconds"]),
             message="b takes over an expired lease")
    spec = lease(rest, ns)
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] == 1
    assert not ghost.try_acquire_or_renew()  # the ghost cannot come back while b renews


def test_lease_written_by_us_reads_back_consistently(rest: Rest, new_namespace) -> None:
    ns = new_namespace("kube-leader")
    elector = LeaderElector(rest, ns, "lock", "me", **FAST)  # type: ignore[arg-type]
    assert elector.try_acquire_or_renew()
    seen = observe(None, lease(rest, ns), 0.0)
    assert seen.holder == "me" and seen.duration == FAST["lease_seconds"]
    assert not lease_expired(seen, 0.0)
    assert lease_expired(seen, 4.0)
    assert elector.release()
    assert lease_expired(observe(seen, lease(rest, ns), 0.0), 0.0)


def test_a_leader_whose_work_fails_releases_and_another_takes_over(rest: Rest,
                                                                     candidates) -> None:
    """The failed leader's Lease would last a minute: b leads only because a released it."""
    ns, made = candidates
    slow_expiry = {"lease_seconds": 60, "failures": Backoff(initial=30, cap=30, jitter=0)}

    def broken(lost: threading.Event) -> None:
        raise RuntimeError("controller could not start")

    a = Candidate(rest, ns, "a", broken, **slow_expiry)
    made.append(a)
    a.start()
    wait_for(lambda: a.terms, timeout=10, message="a leads")
    wait_for(lambda: a.elector.failure is not None, timeout=10, interval=0.05,
             message="a's term ends with its work")
    assert "holderIdentity" not in lease(rest, ns)  # released, not left to expire

    b = Candidate(rest, ns, "b", **slow_expiry).start()
    made.append(b)
    wait_for(lambda: b.elector.is_leader, timeout=10, message="b takes over the released lease")
    spec = lease(rest, ns)
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] >= 1
    # a is backing off, not campaigning, and says why.
    assert not a.elector.is_leader and "RuntimeError" in (a.elector.failure or "")
    assert len(a.terms) == 1
