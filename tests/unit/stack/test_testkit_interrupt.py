"""testkit/interrupt.py: a bench run stopped by a signal still stops what it started."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from testkit.interrupt import interruptible

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Unhandled(Exception):
    pass


def unhandled(signum: int, _frame: object) -> None:
    raise Unhandled(signal.Signals(signum).name)


@pytest.fixture
def handlers() -> Iterator[None]:
    saved = {sig: signal.getsignal(sig) for sig in SIGNALS}
    # A shell without job control starts a background command with SIGINT ignored.
    # SIGTERM's default would kill pytest itself: here it fails the test instead.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, unhandled)
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_a_signal_becomes_an_interrupt_that_finally_blocks_see(handlers: None, sig: signal.Signals) -> None:
    interruptible()
    with pytest.raises(KeyboardInterrupt, match=sig.name):
        signal.raise_signal(sig)
