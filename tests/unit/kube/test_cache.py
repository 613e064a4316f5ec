"""kube.cache: diffing and the list/watch/relist loop against a fake API."""

from __future__ import annotations

import copy
import queue
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from raykueue.kube.backoff import Backoff
from raykueue.kube.cache import ADDED, DELETED, MODIFIED, WatchCache, diff, drop_managed_fields
from raykueue.kube.resources import PODS
from raykueue.kube.rest import ApiError
from testkit.waiting import wait_for


def pod(ns: str, name: str, rv: int, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name, "resourceVersion": str(rv)}, **extra}


# -- pure pieces -----------------------------------------------------------------

def test_diff_reports_adds_changes_and_deletes_only() -> None:
    old = {("a", "same"): pod("a", "same", 1), ("a", "changed"): pod("a", "changed", 2),
           ("b", "gone"): pod("b", "gone", 3)}
    new = {("a", "same"): pod("a", "same", 1), ("a", "changed"): pod("a", "changed", 7),
           ("c", "new"): pod("c", "new", 8)}
    events = {(t, o["metadata"]["name"]) for t, o in diff(old, new)}
    assert events == {(MODIFIED, "changed"), (ADDED, "new"), (DELETED, "gone")}


def test_diff_delete_carries_last_known_object() -> None:
    last = pod("a", "x", 4, spec={"n": 1})
    [(kind, obj)] = diff({("a", "x"): last}, {})
    assert kind == DELETED and obj is last


def test_drop_managed_fields() -> None:
    obj = {"metadata": {"name": "a", "managedFields": [{"manager": "x"}]}}
    assert drop_managed_fields(obj) == {"metadata": {"name": "a"}}


# -- a scripted API ----------------------------------------------------------------

class FakeStream:
    def __init__(self) -> None:
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.closed = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        while not self.closed:
            try:
                event = self.events.get(timeout=0.02)
            except queue.Empty:
                continue
            if event is None:
                return
            yield event

    def close(self) -> None:
        self.closed = True


class FakeApi:
    """Enough of list+watch: paginated lists, live watches, forced expiry."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.rv = 10
        self.streams: list[FakeStream] = []
        self.list_calls: list[dict[str, Any]] = []
        self.watch_calls: list[dict[str, Any]] = []
        self.fail_gets = 0
        self.deaf = False  # changes made while deaf reach no watcher
        self.oldest = 0  # watches from before this resourceVersion are answered 410
        self.lock = threading.Lock()

    # writes
    def put(self, ns: str, name: str, **extra: Any) -> None:
        with self.lock:
            self.rv += 1
            event = MODIFIED if (ns, name) in self.objects else ADDED
            obj = pod(ns, name, self.rv, **extra)
            obj["metadata"]["managedFields"] = [{"manager": "test"}]
            self.objects[(ns, name)] = obj
            self._emit(event, obj)

    def remove(self, ns: str, name: str) -> None:
        with self.lock:
            self.rv += 1
            obj = self.objects.pop((ns, name))
            obj = copy.deepcopy(obj)
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self._emit(DELETED, obj)

    def bookmark(self) -> None:
        with self.lock:
            self.rv += 1
            self._emit("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": str(self.rv)}})

    def expire_watches(self) -> None:
        for stream in self.live():
            stream.events.put({"type": "ERROR", "object": {
                "kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}})

    def end_watches(self) -> None:
        for stream in self.live():
            stream.events.put(None)

    def live(self) -> list[FakeStream]:
        return [s for s in self.streams if not s.closed]

    def _emit(self, event_type: str, obj: dict[str, Any]) -> None:
        if self.deaf:
            return
        for stream in self.live():
            stream.events.put({"type": event_type, "object": copy.deepcopy(obj)})

    # the Rest surface WatchCache uses
    def get(self, path: str, query: dict[str, Any] | None = None) -> dict[str, Any]:
        query = dict(query or {})
        self.list_calls.append(query)
        if self.fail_gets:
            self.fail_gets -= 1
            raise ApiError(0, "ConnectionRefusedError")
        with self.lock:
            keys = sorted(self.objects)
            start = int(query.get("continue") or 0)
            limit = int(query.get("limit") or len(keys) or 1)
            page = keys[start:start + limit]
            more = start + limit < len(keys)
            items = []
            for k in page:
                item = copy.deepcopy(self.objects[k])
                items.append(item)
            return {"kind": "PodList", "apiVersion": "v1",
                    "metadata": {"resourceVersion": str(self.rv),
                                 **({"continue": str(start + limit)} if more else {})},
                    "items": items}

    def watch(self, path: str, query: dict[str, Any] | None = None, *,
              timeout_seconds: int = 60) -> FakeStream:
        self.watch_calls.append(dict(query or {}))
        stream = FakeStream()
        self.streams.append(stream)
        if int((query or {}).get("resourceVersion") or 0) < self.oldest:
            stream.events.put({"type": "ERROR", "object": {"kind": "Status", "code": 410}})
        return stream


@pytest.fixture
def api() -> FakeApi:
    api = FakeApi()
    for i in range(5):
        api.put("ns1" if i % 2 else "ns2", f"p{i}")
    return api


@pytest.fixture
def started() -> Iterator[list[WatchCache]]:
    caches: list[WatchCache] = []
    yield caches
    for cache in caches:
        cache.stop()


def make_cache(api: FakeApi, started: list[WatchCache], **kw: Any) -> tuple[
        WatchCache, list[tuple[str, str]]]:
    cache = WatchCache(api, PODS, transform=drop_managed_fields, page_size=2,  # type: ignore[arg-type]
                       backoff=Backoff(initial=0.01, cap=0.05), **kw)
    seen: list[tuple[str, str]] = []
    cache.add_handler(lambda t, o: seen.append((t, o["metadata"]["name"])))
    started.append(cache)
    return cache.start(), seen


def test_initial_list_paginates_fills_kind_and_transforms(
        api: FakeApi, started: list[WatchCache]) -> None:
    cache, seen = make_cache(api, started, label_selector="app=x")
    assert cache.wait_synced(3)
    assert len(api.list_calls) == 3  # 5 objects in pages of 2
    assert all(c["labelSelector"] == "app=x" for c in api.list_calls)
    assert sorted(seen) == sorted((ADDED, f"p{i}") for i in range(5))
    obj = cache.get("ns1", "p1")
    assert obj is not None
    assert obj["kind"] == "Pod" and obj["apiVersion"] == "v1"
    assert "managedFields" not in obj["metadata"]
    assert {o["metadata"]["name"] for o in cache.list("ns1")} == {"p1", "p3"}
    assert len(cache.list()) == len(cache) == 5
    assert cache.get("nope", "p1") is None


def test_watch_resumes_from_list_with_bookmarks(api: FakeApi, started: list[WatchCache]) -> None:
    cache, _ = make_cache(api, started)
    assert cache.wait_synced(3)
    assert wait_for(lambda: bool(api.watch_calls))
    call = api.watch_calls[0]
    assert call["resourceVersion"] == "15" and call["allowWatchBookmarks"] is True


def test_watch_events_update_store_then_handlers(api: FakeApi, started: list[WatchCache]) -> None:
    cache, seen = make_cache(api, started)
    assert cache.wait_synced(3)
    store_at_event: list[bool] = []
    # Handlers run after the store changed: the object is already readable.
    cache.add_handler(lambda t, o: store_at_event.append(
        (cache.get("ns9", "new") is not None) == (t != DELETED)))
    assert wait_for(lambda: bool(api.live()))
    seen.clear()
    api.put("ns9", "new", spec={"v": 1})
    api.put("ns9", "new", spec={"v": 2})
    api.remove("ns9", "new")
    assert wait_for(lambda: len(seen) == 3)
    assert seen == [(ADDED, "new"), (MODIFIED, "new"), (DELETED, "new")]
    assert store_at_event == [True, True, True]
    assert cache.get("ns9", "new") is None
    assert cache.resource_version == str(api.rv)
    api.bookmark()
    assert wait_for(lambda: cache.resource_version == str(api.rv))


def test_relist_after_gone_synthesizes_missed_changes(
        api: FakeApi, started: list[WatchCache]) -> None:
    cache, seen = make_cache(api, started)
    assert cache.wait_synced(3)
    assert wait_for(lambda: bool(api.live()))
    seen.clear()
    api.deaf = True
    api.put("ns1", "p1", spec={"changed": True})  # modified while away
    api.remove("ns2", "p0")  # deleted while away
    api.put("ns3", "fresh")  # created while away
    api.deaf = False
    lists_before = len(api.list_calls)
    api.expire_watches()
    assert wait_for(lambda: len(seen) == 3)
    assert sorted(seen) == [(ADDED, "fresh"), (DELETED, "p0"), (MODIFIED, "p1")]
    assert len(api.list_calls) > lists_before
    assert cache.get("ns2", "p0") is None
    got = cache.get("ns1", "p1")
    assert got is not None and got["spec"] == {"changed": True}
    # And it keeps watching afterwards, from the new list.
    assert wait_for(lambda: bool(api.live()))
    api.put("ns3", "later")
    assert wait_for(lambda: (ADDED, "later") in seen)


def test_handler_exception_does_not_stop_the_watch(
        api: FakeApi, started: list[WatchCache]) -> None:
    cache, seen = make_cache(api, started)

    def broken(event_type: str, obj: dict[str, Any]) -> None:
        raise RuntimeError("boom")

    cache.add_handler(broken)
    assert cache.wait_synced(3)
    assert wait_for(lambda: bool(api.live()))
    api.put("ns1", "after")
    assert wait_for(lambda: (ADDED, "after") in seen)
    assert cache.get("ns1", "after") is not None


def test_errors_back_off_and_recover(api: FakeApi, started: list[WatchCache]) -> None:
    api.fail_gets = 2
    errors: list[str | None] = []
    cache, _ = make_cache(api, started)
    assert wait_for(lambda: (errors.append(cache.last_sync_error) or cache.synced))
    assert any(e and "ConnectionRefusedError" in e for e in errors)
    assert wait_for(lambda: cache.last_sync_error is None)
    assert len(cache) == 5


def test_sync_handlers_hear_each_failure_and_each_complete_list(
        api: FakeApi, started: list[WatchCache]) -> None:
    """An empty list brings no event; a reader of an absent object learns of it here."""
    api.objects.clear()
    api.fail_gets = 2
    heard: list[str | None] = []
    cache = WatchCache(api, PODS, backoff=Backoff(initial=0.01, cap=0.05))  # type: ignore[arg-type]
    cache.add_sync_handler(heard.append)
    cache.add_sync_handler(lambda _error: 1 / 0)  # a failing one stops nothing
    started.append(cache.start())
    assert cache.wait_synced(3) and len(cache) == 0
    assert wait_for(lambda: len(heard) == 3)
    assert [e is not None and "ConnectionRefusedError" in e for e in heard] == [True, True, False]


def test_watch_reconnects_when_server_ends_stream(api: FakeApi, started: list[WatchCache]) -> None:
    cache, seen = make_cache(api, started)
    assert cache.wait_synced(3)
    assert wait_for(lambda: bool(api.live()))
    api.end_watches()
    assert wait_for(lambda: len(api.watch_calls) >= 2 and bool(api.live()))
    assert len(api.list_calls) == 3  # resumed, not relisted
    api.put("ns1", "x")
    assert wait_for(lambda: (ADDED, "x") in seen)


def test_stop_ends_thread_promptly(api: FakeApi) -> None:
    cache = WatchCache(api, PODS)  # type: ignore[arg-type]
    cache.start()
    assert cache.wait_synced(3)
    assert wait_for(lambda: bool(api.live()))
    thread = cache._thread
    # The watch would run for 60 s; stop() gives the thread 5 s to end. Only a stop
    # that closes the stream leaves no live watch and no thread behind.
    cache.stop()
    assert not api.live()
    assert thread is not None and not thread.is_alive()
    thread = cache._thread
    assert thread is not None and not thread.is_alive()


def test_restart_resumes_from_last_resource_version(
        api: FakeApi, started: list[WatchCache]) -> None:
    cache, _ = make_cache(api, started)
    assert cache.wait_synced(3)
    assert wait_for(lambda: bool(api.live()))
    cache.stop()
    rv = cache.resource_version
    cache.start()
    assert wait_for(lambda: bool(api.live()))
    assert api.watch_calls[-1]["resourceVersion"] == rv
    assert len(api.list_calls) == 3  # no relist needed


def test_restart_after_expiry_relists_and_reports_what_changed(
        api: FakeApi, started: list[WatchCache]) -> None:
    cache, seen = make_cache(api, started)
    assert cache.wait_synced(3)
    assert wait_for(lambda: bool(api.live()))
    cache.stop()
    seen.clear()
    api.remove("ns1", "p1")
    api.oldest = api.rv + 1  # history compacted past what the cache holds
    cache.start()
    assert wait_for(lambda: seen == [(DELETED, "p1")])
    assert cache.get("ns1", "p1") is None
