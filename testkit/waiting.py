"""Wait for a condition by polling; tests never sleep for a fixed time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """The condition did not hold in time (an AssertionError, so pytest shows it as a failure)."""


def wait_for(
    fn: Callable[[], T],
    timeout: float = 30.0,
    interval: float = 0.2,
    message: str | Callable[[], str] = "condition",
    *,
    fatal: tuple[type[BaseException], ...] = (),
) -> T:
    """Call `fn` until it returns something truthy; return that value.

    Exceptions raised by `fn` count as "not yet" and the last one is reported on
    timeout, as is the last falsy value. `message` may be a callable so that the
    timeout text can describe the current state (e.g. dump an object).
    Exceptions of a type in `fatal` propagate at once (e.g. "the process died").
    """
    deadline = time.monotonic() + timeout
    last: object = None
    last_exc: BaseException | None = None
    delay = min(interval, 0.05)
    while True:
        try:
            value = fn()
            if value:
                return value
            last, last_exc = value, None
        except fatal:
            raise
        except Exception as e:
            last_exc = e
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            detail = f"last error: {last_exc!r}" if last_exc else f"last value: {last!r}"
            raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {text} ({detail})") \
                from last_exc
        time.sleep(delay)
        delay = min(delay * 2, interval)


def holds_for(fn: Callable[[], object], seconds: float, interval: float = 0.1) -> bool:
    """`fn` stays truthy for the whole period: the only way to assert that
    something does not happen (a negative test needs some patience)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not fn():
            return False
        time.sleep(interval)
    return True


# A bound that comes from a setting (a lease, a resync, a watch timeout) is checked
# as `within(setting)`. The faults these tests catch miss by whole multiples of the
# setting (a missed retry, a second expiry, a watch left to time out); a slow shared
# machine adds a fraction of it plus some seconds. How fast the machine happened to
# be is reported as a figure (bench/RESULTS.md), never asserted.
SLACK_FACTOR = 2.0
SLACK_SECONDS = 5.0


def within(seconds: float) -> float:
    return seconds * SLACK_FACTOR + SLACK_SECONDS
