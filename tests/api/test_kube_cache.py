"""kube.cache.WatchCache against the real API server: list, watch, relist on 410."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from raykueue.kube.cache import ADDED, DELETED, MODIFIED, WatchCache, drop_managed_fields
from raykueue.kube.resources import Resource
from raykueue.kube.rest import Rest
from testkit.waiting import wait_for

CONFIGMAPS = Resource("", "v1", "configmaps")


@pytest.fixture
def rest(k8s) -> Rest:
    return Rest(k8s)


class Seen:
    """Thread-safe record of (event, name, data) the cache reported."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, str, dict[str, str] | None]] = []

    def __call__(self, event_type: str, obj: dict[str, Any]) -> None:
        with self.lock:
            self.events.append((event_type, obj["metadata"]["name"], obj.get("data")))

    def names(self, event_type: str) -> list[str]:
        with self.lock:
            return [n for t, n, _ in self.events if t == event_type]

    def clear(self) -> None:
        with self.lock:
            self.events.clear()


@pytest.fixture
def caches() -> Iterator[Callable[..., tuple[WatchCache, Seen]]]:
    made: list[WatchCache] = []

    def make(rest: Rest, ns: str, **kw: Any) -> tuple[WatchCache, Seen]:
        cache = WatchCache(rest, CONFIGMAPS, namespace=ns, transform=drop_managed_fields,
                           watch_timeout=kw.pop("watch_timeout", 60), **kw)
        seen = Seen()
        cache.add_handler(seen)
        made.append(cache.start())
        assert cache.wait_synced(30), cache.last_sync_error
        return cache, seen

    yield make
    for cache in made:
        cache.stop()


def cm(name: str, labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": labels or {}}, "data": data}


def test_list_then_watch_sees_create_update_delete(rest: Rest, new_namespace, caches) -> None:
    ns = new_namespace("kube-cache")
    for i in range(7):
        rest.create(CONFIGMAPS.path(ns), cm(f"pre-{i}", n=str(i)))
    cache, seen = caches(rest, ns, page_size=3)  # more than one page

    assert {f"pre-{i}" for i in range(7)} <= set(seen.names(ADDED))
    pre = cache.get(ns, "pre-3")
    assert pre is not None and pre["data"] == {"n": "3"}
    assert pre["kind"] == "ConfigMap" and pre["apiVersion"] == "v1"
    assert "managedFields" not in pre["metadata"]

    rest.create(CONFIGMAPS.path(ns), cm("live", v="1"))
    wait_for(lambda: "live" in seen.names(ADDED), timeout=10, message="ADDED live")
    rest.merge_patch(CONFIGMAPS.path(ns, "live"), {"data": {"v": "2"}})
    wait_for(lambda: (cache.get(ns, "live") or {}).get("data") == {"v": "2"}, timeout=10,
             message="MODIFIED live in the store")
    assert "live" in seen.names(MODIFIED)
    rest.delete(CONFIGMAPS.path(ns, "live"))
    wait_for(lambda: "live" in seen.names(DELETED), timeout=10, message="DELETED live")
    assert cache.get(ns, "live") is None
    assert cache.last_sync_error is None


def test_label_selector_limits_the_cache(rest: Rest, new_namespace, caches) -> None:
    ns = new_namespace("kube-cache")
    cache, seen = caches(rest, ns, label_selector="team=a")
    rest.create(CONFIGMAPS.path(ns), cm("theirs", {"team": "b"}))
    rest.create(CONFIGMAPS.path(ns), cm("ours", {"team": "a"}))
    wait_for(lambda: "ours" in seen.names(ADDED), timeout=10, message="ADDED ours")
    assert cache.get(ns, "theirs") is None
    # Relabelling out of the selector looks like a delete to the watcher.
    rest.merge_patch(CONFIGMAPS.path(ns, "ours"), {"metadata": {"labels": {"team": "b"}}})
    wait_for(lambda: "ours" in seen.names(DELETED), timeout=10, message="ours left selector")


def test_relist_after_410_reports_what_changed_while_away(
        rest: Rest, new_namespace, caches) -> None:
    ns = new_namespace("kube-cache")
    for name in ("keep", "change", "remove"):
        rest.create(CONFIGMAPS.path(ns), cm(name, v="1"))
    cache, seen = caches(rest, ns)
    cache.stop()
    seen.clear()

    rest.merge_patch(CONFIGMAPS.path(ns, "change"), {"data": {"v": "2"}})
    rest.delete(CONFIGMAPS.path(ns, "remove"))
    rest.create(CONFIGMAPS.path(ns), cm("new", v="1"))
    # Resume from a resourceVersion far in the past. Whether the server still
    # has that history (it replays it) or not (410 Gone, and the cache
    # relists and synthesizes the difference) depends on its watch cache;
    # either way the cache must report what changed and end up current.
    cache._rv = "1"
    cache.start()

    ours = {"keep", "change", "remove", "new"}

    def reported() -> list[tuple[str, str]]:
        # The controller-manager publishes kube-root-ca.crt into every new
        # namespace whenever it gets to it; only our ConfigMaps are the subject.
        with seen.lock:
            return sorted((t, n) for t, n, _ in seen.events if n in ours)

    expected = {(ADDED, "new"), (DELETED, "remove"), (MODIFIED, "change")}
    wait_for(lambda: expected <= set(reported()), timeout=15,
             message=lambda: f"events for what changed, got {reported()}")
    wait_for(lambda: sorted(o["metadata"]["name"] for o in cache.list(ns)
                            if o["metadata"]["name"] in ours) == ["change", "keep", "new"],
             timeout=15, message="the store to match the server")
    assert cache.get(ns, "remove") is None
    changed = cache.get(ns, "change")
    assert changed is not None and changed["data"] == {"v": "2"}

    # And it is watching again from the fresh list.
    rest.create(CONFIGMAPS.path(ns), cm("after", v="1"))
    wait_for(lambda: "after" in seen.names(ADDED), timeout=10, message="watch after relist")


def test_bookmarks_and_server_timeouts_keep_the_watch_alive(
        rest: Rest, new_namespace, caches) -> None:
    ns = new_namespace("kube-cache")
    # The server ends each watch after 5s, sending a bookmark 2s before.
    cache, seen = caches(rest, ns, watch_timeout=5)
    first_rv = cache.resource_version
    # Writes elsewhere advance the server's resourceVersion; bookmarks carry
    # it to us although nothing happens in our namespace.
    other = new_namespace("kube-cache-other")
    for i in range(3):
        rest.create(CONFIGMAPS.path(other), cm(f"noise-{i}"))
    wait_for(lambda: int(cache.resource_version) > int(first_rv), timeout=15,
             message="a bookmark advanced the resourceVersion")
    # Nothing of ours was added: the bookmarks moved the resourceVersion. (The
    # controller-manager's kube-root-ca.crt may arrive at any time.)
    assert [n for n in seen.names(ADDED) if n != "kube-root-ca.crt"] == []
    rest.create(CONFIGMAPS.path(ns), cm("late"))
    wait_for(lambda: "late" in seen.names(ADDED), timeout=15, message="event after rewatch")
    assert cache.last_sync_error is None


def test_stop_is_prompt(rest: Rest, new_namespace, caches) -> None:
    ns = new_namespace("kube-cache")
    cache, _ = caches(rest, ns)
    thread = cache._thread
    # The server would keep the watch open for a minute and stop() waits 5 s for
    # the thread: it is gone only if stop() closed the stream.
    cache.stop()
    assert thread is not None and not thread.is_alive()
