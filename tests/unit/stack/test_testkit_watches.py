"""testkit/watches.py: the one way tests open and close their watch caches."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from testkit.watches import Watching, watching


class Cache:
    """Records what is asked of it; `syncs` says whether its first list arrives."""

    def __init__(self, name: str, log: list[str], syncs: bool = True) -> None:
        self.name, self.log, self.syncs = name, log, syncs
        self.resource, self.namespace, self.last_sync_error = SimpleNamespace(plural=name), "ns", None

    def start(self) -> Cache:
        self.log.append(f"start {self.name}")
        return self

    def wait_synced(self, timeout: float) -> bool:
        self.log.append(f"synced {self.name}")
        return self.syncs

    def stop(self) -> None:
        self.log.append(f"stop {self.name}")


class Watcher(Watching):
    def __init__(self, *caches: Cache) -> None:
        self.caches = caches


def test_each_cache_is_listed_before_the_next_starts_and_all_stop() -> None:
    log: list[str] = []
    with Watcher(Cache("rayclusters", log), Cache("pods", log)) as w:
        assert isinstance(w, Watcher)
        assert log == ["start rayclusters", "synced rayclusters", "start pods", "synced pods"]
    assert log[4:] == ["stop rayclusters", "stop pods"]


def test_a_cache_that_never_lists_fails_the_start_and_stops_what_started() -> None:
    log: list[str] = []
    caches = (Cache("workloads", log), Cache("pods", log, syncs=False), Cache("events", log))
    with pytest.raises(AssertionError, match="watch of pods in ns never synced"), watching(*caches):
        pass
    assert "start events" not in log
    assert log[-2:] == ["stop workloads", "stop pods"]
