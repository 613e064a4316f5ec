"""A run stopped by a signal still stops what it started."""

from __future__ import annotations

import signal


def interruptible() -> None:
    """SIGINT and SIGTERM end a run through its `finally` blocks, which stop the stack
    and the servers it started. Without this a run started in the background by a
    shell without job control (`python bench/x.py &`) ignores SIGINT, the shell having
    set it so, and SIGTERM kills it on the spot, leaving the stack running."""
    def stop(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
