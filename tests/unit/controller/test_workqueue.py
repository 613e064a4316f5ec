"""The work queue's guarantees: dedup, one worker per key, backoff."""

from __future__ import annotations

import threading

from raykueue.controller.workqueue import WorkQueue


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_key_is_queued_once_however_often_added():
    q: WorkQueue[str] = WorkQueue()
    for _ in range(3):
        q.add("a")
    q.add("b")
    assert len(q) == 2
    assert q.get(timeout=0) == "a"
    assert q.get(timeout=0) == "b"
    assert q.get(timeout=0) is None


def test_key_added_while_in_flight_comes_back_after_done():
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    assert q.get(timeout=0) == "a"
    q.add("a")  # an event arrives while a worker holds "a"
    assert q.get(timeout=0) is None  # not handed to a second worker
    q.done("a")
    assert q.get(timeout=0) == "a"
    q.done("a")
    assert q.get(timeout=0) is None


def test_retry_backs_off_exponentially_and_forget_resets():
    clock = Clock()
    q: WorkQueue[str] = WorkQueue(base_delay=1.0, max_delay=5.0, clock=clock)
    assert [q.retry("a") for _ in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert q.failures("a") == 5
    q.forget("a")
    assert q.failures("a") == 0
    assert q.retry("a") == 1.0


def test_delayed_key_is_handed_out_when_due():
    clock = Clock()
    q: WorkQueue[str] = WorkQueue(clock=clock)
    q.add_after("a", 2.0)
    assert q.get(timeout=0) is None
    clock.now += 2.0
    assert q.get(timeout=0) == "a"


def test_delayed_duplicate_of_a_queued_key_is_merged():
    clock = Clock()
    q: WorkQueue[str] = WorkQueue(clock=clock)
    q.add("a")
    q.add_after("a", 1.0)
    clock.now += 1.0
    assert q.get(timeout=0) == "a"
    assert q.get(timeout=0) is None


def test_shutdown_wakes_a_blocked_worker():
    q: WorkQueue[str] = WorkQueue()
    got: list[object] = []
    thread = threading.Thread(target=lambda: got.append(q.get()))
    thread.start()
    q.shutdown()
    thread.join(timeout=5)
    assert got == [None]
    q.add("a")
    assert q.get(timeout=0) is None


def test_blocked_worker_wakes_on_add():
    q: WorkQueue[str] = WorkQueue()
    got: list[object] = []
    thread = threading.Thread(target=lambda: got.append(q.get(timeout=5)))
    thread.start()
    q.add("a")
    thread.join(timeout=5)
    assert got == ["a"]
