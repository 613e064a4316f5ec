"""kube.backoff: the one retry delay used by caches, the work queue and leader election."""

from __future__ import annotations

import pytest

from raykueue.kube.backoff import Backoff


def test_backoff_grows_caps_and_resets() -> None:
    b = Backoff(initial=1, cap=8, factor=2, jitter=0, rand=lambda: 0.5)
    assert [b.next() for _ in range(6)] == [1, 2, 4, 8, 8, 8]
    b.reset()
    assert b.next() == 1


def test_backoff_jitter_stays_within_band_and_cap() -> None:
    low = Backoff(initial=10, cap=100, jitter=0.2, rand=lambda: 0.0)
    high = Backoff(initial=10, cap=100, jitter=0.2, rand=lambda: 1.0)
    assert low.next() == pytest.approx(8.0)
    assert high.next() == pytest.approx(12.0)
    capped = Backoff(initial=100, cap=100, jitter=0.2, rand=lambda: 1.0)
    assert capped.next() == 100


def test_delay_is_pure_and_survives_many_attempts() -> None:
    b = Backoff(initial=0.05, cap=30, jitter=0)
    assert [b.delay(n) for n in range(3)] == [0.05, 0.1, 0.2]
    assert b.delay(5000) == 30  # no float overflow for a key that keeps failing
    assert b.attempts == 0  # delay() counts nothing


def test_nonsense_settings_are_refused() -> None:
    assert Backoff(initial=0, cap=0).delay(3) == 0  # retry at once, as tests ask
    for bad in ({"initial": -1}, {"initial": 2, "cap": 1}, {"factor": 0.5}, {"jitter": 1.0}):
        with pytest.raises(ValueError):
            Backoff(**bad)  # type: ignore[arg-type]
