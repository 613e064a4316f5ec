"""kube.informers: one watch per resource per process, lent to the controller."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from raykueue.controller.caches import RAYCLUSTERS, Caches
from raykueue.controller.config import ControllerConfig
from raykueue.core.rayobjects import slim_raycluster
from raykueue.kube.cache import ADDED, MODIFIED, WatchCache
from raykueue.kube.informers import Informers, Loan
from raykueue.kube.resources import PODS
from testkit.waiting import wait_for


def obj(name: str, rv: int) -> dict[str, Any]:
    return {"kind": "RayCluster", "apiVersion": "ray.io/v1",
            "metadata": {"namespace": "a", "name": name, "resourceVersion": str(rv)}}


class Stream:
    def __init__(self) -> None:
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.closed = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        while not self.closed:
            try:
                yield self.events.get(timeout=0.02)
            except queue.Empty:
                continue

    def close(self) -> None:
        self.closed = True


class Api:
    """A list of fixed objects, and watches the test writes events into."""

    def __init__(self, *objs: dict[str, Any]) -> None:
        self.objs = list(objs)
        self.lists: list[str] = []
        self.streams: list[Stream] = []
        self.lock = threading.Lock()

    def get(self, path: str, query: dict[str, Any] | None = None) -> dict[str, Any]:
        self.lists.append(path)
        return {"kind": "RayClusterList", "apiVersion": "ray.io/v1",
                "metadata": {"resourceVersion": "10"}, "items": [dict(x) for x in self.objs]}

    def watch(self, path: str, query: dict[str, Any], timeout_seconds: int = 60) -> Stream:
        stream = Stream()
        with self.lock:
            self.streams.append(stream)
        return stream

    def send(self, event_type: str, item: dict[str, Any]) -> None:
        wait_for(lambda: any(not s.closed for s in self.streams), timeout=5,
                 message="a watch to be open")
        for stream in self.streams:
            if not stream.closed:
                stream.events.put({"type": event_type, "object": item})


@pytest.fixture
def api() -> Api:
    return Api(obj("one", 5))


@pytest.fixture
def informers(api: Api) -> Iterator[Informers]:
    made = Informers(api)  # type: ignore[arg-type]
    yield made
    made.stop_all()


def test_one_watch_is_opened_once_and_readers_must_agree_on_its_shape(
        api: Api, informers: Informers) -> None:
    first = informers.open(RAYCLUSTERS, transform=slim_raycluster)
    assert informers.open(RAYCLUSTERS, transform=slim_raycluster) is first
    assert first.wait_synced(5)
    assert api.lists == [RAYCLUSTERS.path()]
    with pytest.raises(ValueError, match="agree on one"):
        informers.open(RAYCLUSTERS)
    # Another namespace or selector is another watch.
    assert informers.open(RAYCLUSTERS, namespace="a", transform=slim_raycluster) is not first
    assert informers.borrow(PODS) is None
    assert informers.borrow(RAYCLUSTERS) is None  # not in the shape it is kept in


def test_a_loan_sees_what_the_cache_holds_then_its_changes_until_it_is_returned(
        api: Api, informers: Informers) -> None:
    owner_seen: list[tuple[str, str]] = []
    cache = informers.open(RAYCLUSTERS, transform=slim_raycluster)
    cache.add_handler(lambda e, o: owner_seen.append((e, o["metadata"]["name"])))
    assert cache.wait_synced(5)
    loan = informers.borrow(RAYCLUSTERS, transform=slim_raycluster)
    assert isinstance(loan, Loan)
    seen: list[tuple[str, str]] = []
    loan.add_handler(lambda e, o: seen.append((e, o["metadata"]["name"])))
    assert seen == []  # handlers go on at start, as a fresh cache's do
    loan.start()
    assert seen == [(ADDED, "one")]
    assert loan.synced and loan.get("a", "one") is cache.get("a", "one")
    api.send(MODIFIED, obj("one", 6))
    wait_for(lambda: (MODIFIED, "one") in seen, timeout=5, message="the loan to see a change")
    loan.stop()
    api.send(ADDED, obj("two", 7))
    wait_for(lambda: (ADDED, "two") in owner_seen, timeout=5, message="the owner to see an add")
    # The loan is returned: its handler saw nothing more, and the watch runs on for its owner.
    assert (ADDED, "two") not in seen
    assert cache.get("a", "two") is not None and len(api.lists) == 1


def test_the_controller_borrows_the_process_raycluster_watch(informers: Informers) -> None:
    shared = informers.open(RAYCLUSTERS, transform=slim_raycluster)
    made: list[str] = []

    def make(rest: object, resource: Any, **kw: Any) -> WatchCache:
        made.append(resource.plural)
        return WatchCache(rest, resource, **kw)  # type: ignore[arg-type]

    caches = Caches.open(None, ControllerConfig(), "v1beta2", make, informers)  # type: ignore[arg-type]
    assert isinstance(caches.rayclusters, Loan) and caches.rayclusters.cache is shared
    assert "rayclusters" not in made
    # A controller in one namespace reads another watch than the process's: its own.
    made.clear()
    Caches.open(None, ControllerConfig(namespace="a"), "v1beta2", make, informers)  # type: ignore[arg-type]
    assert "rayclusters" in made
