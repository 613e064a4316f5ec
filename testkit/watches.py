"""Watch caches a test holds open over a scenario: one way to open them, one to close.

`Watching` is the base of every watcher that checks or records a scenario from
watch caches (invariants, quota watches, courses): its `caches`, in the order
given, are started and each is listed before the next starts (so a handler that
looks an object up in an earlier cache finds it), and all are stopped on exit.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Self

from raykueue.kube.cache import WatchCache

SYNC_TIMEOUT = 30.0


def start_watches(caches: Iterable[WatchCache], timeout: float = SYNC_TIMEOUT) -> None:
    """Start each cache in turn and wait for its first list; on a failure stop what was
    started (no watch outlives a test that could not begin)."""
    started: list[WatchCache] = []
    try:
        for cache in caches:
            started.append(cache)
            cache.start()
            where = f" in {cache.namespace}" if cache.namespace else ""
            assert cache.wait_synced(timeout), (
                f"watch of {cache.resource.plural}{where} never synced: {cache.last_sync_error}")
    except BaseException:
        stop_watches(started)
        raise


def stop_watches(caches: Iterable[WatchCache]) -> None:
    for cache in caches:
        cache.stop()


@contextmanager
def watching(*caches: WatchCache, timeout: float = SYNC_TIMEOUT) -> Iterator[None]:
    """The caches listed for the `with` block, stopped after it."""
    start_watches(caches, timeout)
    try:
        yield
    finally:
        stop_watches(caches)


class Watching:
    """A context manager over `self.caches` (set by the subclass's __init__)."""

    caches: Sequence[WatchCache]

    def __enter__(self) -> Self:
        start_watches(self.caches)
        return self

    def __exit__(self, *exc: object) -> None:
        stop_watches(self.caches)
