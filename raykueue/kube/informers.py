"""One watch per resource per process: the caches a process shares, and loans of them.

The admission side opens its caches for as long as the process runs; the
controller opens its own for each term it leads. Where both read the same
objects (RayClusters) the controller borrows the running cache instead of
watching it a second time: `Informers` holds the shared caches by what they
watch, and `Loan` is a borrower's handle, which adds its handlers to the
shared cache (seeing what it holds already as ADDED, as a fresh cache's
handlers see the first list) and takes them off again at `stop()`, leaving the
cache running for its owner.
"""

from __future__ import annotations

import threading
from typing import Any

from raykueue.kube.cache import Handler, Obj, Transform, WatchCache
from raykueue.kube.resources import Resource
from raykueue.kube.rest import Rest

# What a watch is: the path it lists (group, version, plural, namespace) and its selectors.
WatchKey = tuple[str, str, str]


def watch_key(resource: Resource, namespace: str | None = None,
              label_selector: str | None = None, field_selector: str | None = None) -> WatchKey:
    return (resource.path(namespace), label_selector or "", field_selector or "")


class Informers:
    """The process's shared caches, one per watch; `stop_all()` at shutdown."""

    def __init__(self, rest: Rest) -> None:
        self._rest = rest
        self._lock = threading.Lock()
        self._caches: dict[WatchKey, tuple[WatchCache, Transform | None]] = {}

    def open(self, resource: Resource, *, namespace: str | None = None,
             label_selector: str | None = None, transform: Transform | None = None) -> WatchCache:
        """The shared cache of this watch, made and started on first use.

        Every reader of one watch reads one shape of object, so a second caller
        must ask for the same transform: two shapes would need two watches.
        """
        key = watch_key(resource, namespace, label_selector)
        with self._lock:
            found = self._caches.get(key)
            if found is None:
                cache = WatchCache(self._rest, resource, namespace=namespace,
                                   label_selector=label_selector, transform=transform)
                self._caches[key] = (cache, transform)
                cache.start()
                return cache
        cache, kept = found
        if kept is not transform:
            raise ValueError(f"{key[0]} is shared with another transform ({kept!r}, not "
                             f"{transform!r}): its readers must agree on one")
        return cache

    def borrow(self, resource: Resource, *, namespace: str | None = None,
               label_selector: str | None = None, transform: Transform | None = None,
               ) -> Loan | None:
        """A loan of the shared cache of this watch, or None when nothing shares it."""
        key = watch_key(resource, namespace, label_selector)
        with self._lock:
            found = self._caches.get(key)
        if found is None or found[1] is not transform:
            return None
        return Loan(found[0])

    @property
    def caches(self) -> tuple[WatchCache, ...]:
        with self._lock:
            return tuple(cache for cache, _ in self._caches.values())

    def stop_all(self) -> None:
        for cache in self.caches:
            cache.stop()


class Loan:
    """A shared cache as a borrower sees it: reads pass through, `start` and `stop`
    add and remove the borrower's handlers only."""

    def __init__(self, cache: WatchCache) -> None:
        self.cache = cache
        self.resource = cache.resource
        self._pending: list[Handler] = []
        self._added: list[Handler] = []

    @property
    def synced(self) -> bool:
        return self.cache.synced

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self.cache.wait_synced(timeout)

    def get(self, namespace: str | None, name: str) -> Obj | None:
        return self.cache.get(namespace, name)

    def list(self, namespace: str | None = None) -> list[Obj]:
        return self.cache.list(namespace)

    def add_handler(self, fn: Handler) -> None:
        """Taken on at `start()`, as a fresh cache's handlers start with its watch."""
        self._pending.append(fn)

    def start(self) -> Any:
        for fn in self._pending:
            self.cache.add_handler(fn, replay=True)
            self._added.append(fn)
        self._pending = []
        return self

    def stop(self, timeout: float = 5.0) -> None:
        for fn in self._added:
            self.cache.remove_handler(fn)
        self._added = []
