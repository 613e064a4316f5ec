"""The one retry delay: exponential, capped, optionally jittered.

Used by the watch caches (reconnects), the controller's work queue (per-key
retries) and leader election (campaigning again after a failed term).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable


class Backoff:
    """Delay `initial * factor**attempt`, capped at `cap`, spread by +-`jitter`.

    `delay(attempt)` is the pure rule, for callers that count attempts per
    key themselves; `next()`/`reset()` count them here for a single retrier.
    """

    def __init__(self, initial: float = 0.5, cap: float = 30.0, factor: float = 2.0,
                 jitter: float = 0.2, rand: Callable[[], float] = random.random) -> None:
        if initial < 0 or cap < initial or factor < 1 or not 0 <= jitter < 1:
            raise ValueError("need 0 <= initial <= cap, factor >= 1, 0 <= jitter < 1")
        self.initial, self.cap, self.factor, self.jitter = initial, cap, factor, jitter
        self._rand = rand
        self._attempt = 0

    def delay(self, attempt: int) -> float:
        """The delay before retry number `attempt` (0 for the first retry)."""
        if self.initial == 0:  # tests retry at once
            return 0.0
        # Grow only as far as the cap: factor**attempt overflows a float after
        # about a thousand failures of one key, and attempts keep counting.
        steps = 0
        if self.factor > 1 and self.cap > self.initial:
            steps = min(attempt, math.ceil(math.log(self.cap / self.initial, self.factor)))
        base = min(self.cap, self.initial * self.factor ** steps)
        if not self.jitter:
            return base
        # Jitter keeps many replicas from retrying in lockstep after an outage.
        return min(self.cap, base * (1.0 + self.jitter * (2.0 * self._rand() - 1.0)))

    def next(self) -> float:
        delay = self.delay(self._attempt)
        self._attempt += 1
        return delay

    def reset(self) -> None:
        self._attempt = 0

    @property
    def attempts(self) -> int:
        """Retries handed out since the last `reset()`."""
        return self._attempt
