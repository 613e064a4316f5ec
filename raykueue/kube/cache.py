"""A watch-backed, read-only local copy of one kind of object.

One daemon thread lists, then watches from the list's resourceVersion with
bookmarks so that a quiet watch still advances. When the server says the
resourceVersion is too old (410 Gone) the thread lists again and turns the
difference between the old and new contents into ordinary events, so handlers
never miss a delete that happened while we were away.

Objects handed out are shared, not copied: treat them as read-only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from raykueue.kube.backoff import Backoff
from raykueue.kube.resources import Resource
from raykueue.kube.rest import ApiError, Rest, WatchStream

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str]
Handler = Callable[[str, Obj], None]
Transform = Callable[[Obj], Obj]
# Called with None after each complete list, with the error after each failed
# list or watch: how a reader learns that an empty cache means "cannot read".
SyncHandler = Callable[[str | None], None]

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


def resource_version(obj: Mapping[str, Any]) -> str:
    return (obj.get("metadata") or {}).get("resourceVersion") or ""


def diff(old: Mapping[Key, Obj], new: Mapping[Key, Obj]) -> list[tuple[str, Obj]]:
    """Events that turn `old` into `new`; deletes carry the last known object."""
    events: list[tuple[str, Obj]] = []
    for key, obj in new.items():
        before = old.get(key)
        if before is None:
            events.append((ADDED, obj))
        elif resource_version(before) != resource_version(obj):
            events.append((MODIFIED, obj))
    events.extend((DELETED, obj) for key, obj in old.items() if key not in new)
    return events


def drop_managed_fields(obj: Obj) -> Obj:
    """A common transform: managedFields are large and rarely read."""
    obj.get("metadata", {}).pop("managedFields", None)
    return obj


class WatchCache:
    """List+watch one resource into memory; see the module docstring.

    Reads (`get`, `list`) take a lock for a dict lookup only and never wait on
    the network. Handlers run on the watch thread after the store changed;
    keep them quick and do not mutate the object they receive.
    """

    def __init__(self, rest: Rest, resource: Resource, *, namespace: str | None = None,
                 label_selector: str | None = None, field_selector: str | None = None,
                 transform: Transform | None = None,
                 page_size: int = 500, watch_timeout: int = 60,
                 backoff: Backoff | None = None) -> None:
        self._rest = rest
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        # metadata.name=<x> lets RBAC grant list/watch on one named object.
        self.field_selector = field_selector
        self._transform = transform
        self._page_size = page_size
        self._watch_timeout = watch_timeout
        self._backoff = backoff or Backoff()

        self._lock = threading.Lock()
        self._store: dict[str, dict[str, Obj]] = {}  # namespace -> name -> object
        self._handlers: list[Handler] = []
        # Held while handlers are called, and while one is added or removed: a
        # handler added with `replay` sees every change after its replay, and one
        # removed is not running when `remove_handler` returns.
        self._dispatch = threading.RLock()
        self._sync_handlers: list[SyncHandler] = []
        self._rv = ""
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._stream: WatchStream | None = None
        self._thread: threading.Thread | None = None
        self.last_sync_error: str | None = None

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> WatchCache:
        """Start the watch thread; after `stop()` this resumes where it left off."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(
                    target=self._run, name=f"watch-{self.resource.plural}", daemon=True)
                self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._lock:
            stream, thread = self._stream, self._thread
        if stream is not None:
            stream.close()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    @property
    def synced(self) -> bool:
        """True once the first list is stored and handed to the handlers.

        It stays true through re-watches and relists; `last_sync_error` says
        whether the cache is currently failing to keep up.
        """
        return self._synced.is_set()

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    @property
    def resource_version(self) -> str:
        return self._rv

    # -- reads -----------------------------------------------------------------

    def get(self, namespace: str | None, name: str) -> Obj | None:
        with self._lock:
            return self._store.get(namespace or "", {}).get(name)

    def list(self, namespace: str | None = None) -> list[Obj]:
        with self._lock:
            if namespace is not None:
                return list(self._store.get(namespace, {}).values())
            return [obj for objs in self._store.values() for obj in objs.values()]

    def __len__(self) -> int:
        with self._lock:
            return sum(len(objs) for objs in self._store.values())

    def add_handler(self, fn: Handler, *, replay: bool = False) -> None:
        """Register before `start()` to also see the initial list as ADDED; with
        `replay`, what the cache holds now is handed to `fn` as ADDED first, so a
        handler added to a running cache misses nothing (a change may come twice)."""
        with self._dispatch:
            if replay:
                for obj in self.list():
                    self._call(fn, ADDED, obj)
            with self._lock:
                self._handlers.append(fn)

    def remove_handler(self, fn: Handler) -> None:
        """`fn` is called no more once this returns (a borrower's term ended)."""
        with self._dispatch, self._lock:
            if fn in self._handlers:
                self._handlers.remove(fn)

    def add_sync_handler(self, fn: SyncHandler) -> None:
        """`fn(None)` after every complete list, `fn(error)` after every failure."""
        with self._lock:
            self._sync_handlers.append(fn)

    def _sync_status(self, error: str | None) -> None:
        with self._lock:
            handlers = tuple(self._sync_handlers)
        for handler in handlers:
            try:
                handler(error)
            except Exception:
                log.exception("%s: sync handler %r failed", self.resource.plural, handler)

    # -- the watch thread ------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                if not self._rv:
                    self._relist()
                self._watch()
            except Exception as exc:
                if self._stop.is_set():
                    break
                if not (isinstance(exc, ApiError) and exc.is_gone):
                    self._failed(exc)
                    continue
                log.info("%s: resourceVersion %s expired; relisting",
                         self.resource.plural, self._rv)
                self._rv = ""
            if time.monotonic() - started < 1.0 and not self._stop.is_set():
                # A server that keeps ending watches at once, or keeps
                # answering 410, must not turn this thread into a busy loop.
                self._stop.wait(self._backoff.next())

    def _failed(self, exc: Exception) -> None:
        self.last_sync_error = f"{type(exc).__name__}: {exc}"
        delay = self._backoff.next()
        log.warning("%s: %s; retrying in %.1fs", self.resource.plural, self.last_sync_error,
                    delay)
        self._sync_status(self.last_sync_error)
        self._stop.wait(delay)

    def _base_query(self) -> dict[str, str | int | bool]:
        query: dict[str, str | int | bool] = {}
        if self.label_selector:
            query["labelSelector"] = self.label_selector
        if self.field_selector:
            query["fieldSelector"] = self.field_selector
        return query

    def _relist(self) -> None:
        items, rv = self._list_all()
        fresh: dict[Key, Obj] = {key_of(obj): obj for obj in items}
        with self._lock:
            old = {(ns, name): obj for ns, objs in self._store.items()
                   for name, obj in objs.items()}
            store: dict[str, dict[str, Obj]] = {}
            for (ns, name), obj in fresh.items():
                store.setdefault(ns, {})[name] = obj
            self._store = store
            self._rv = rv
        self.last_sync_error = None
        self._backoff.reset()
        for event_type, obj in diff(old, fresh):
            self._notify(event_type, obj)
        # Synced only after the handlers saw the first list, so that a waiter
        # on wait_synced() can rely on their view being complete too.
        self._synced.set()
        self._sync_status(None)

    def _list_all(self) -> tuple[list[Obj], str]:
        path = self.resource.path(self.namespace)
        query = self._base_query()
        query["limit"] = self._page_size
        items: list[Obj] = []
        while True:
            try:
                page = self._rest.get(path, query)
            except ApiError as exc:
                if exc.is_gone and "continue" in query:
                    # The continue token outlived etcd's compaction: start over.
                    query.pop("continue")
                    items = []
                    continue
                raise
            kind = str(page.get("kind", ""))
            api_version = page.get("apiVersion") or self.resource.api_version
            for item in page.get("items") or []:
                # List items omit kind/apiVersion for built-in types; fill them
                # so object references built from cached objects are complete.
                item.setdefault("kind", kind.removesuffix("List"))
                item.setdefault("apiVersion", api_version)
                items.append(self._apply_transform(item))
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                return items, str(meta.get("resourceVersion") or "")
            query["continue"] = token

    def _watch(self) -> None:
        query = self._base_query()
        query["resourceVersion"] = self._rv
        query["allowWatchBookmarks"] = True
        stream = self._rest.watch(self.resource.path(self.namespace), query,
                                  timeout_seconds=self._watch_timeout)
        with self._lock:
            self._stream = stream
        self.last_sync_error = None
        try:
            if self._stop.is_set():
                return
            self._consume(stream)
        finally:
            with self._lock:
                self._stream = None
            stream.close()

    def _consume(self, events: Iterable[Mapping[str, Any]]) -> None:
        for event in events:
            event_type = event.get("type")
            obj = event.get("object") or {}
            if event_type == "ERROR":
                raise ApiError.from_status_object(obj)
            if event_type == "BOOKMARK":
                self._rv = resource_version(obj) or self._rv
                continue
            if event_type not in (ADDED, MODIFIED, DELETED):
                log.debug("%s: ignoring watch event %r", self.resource.plural, event_type)
                continue
            self._apply(event_type, self._apply_transform(obj))
            self._backoff.reset()

    def _apply(self, event_type: str, obj: Obj) -> None:
        ns, name = key_of(obj)
        with self._lock:
            if event_type == DELETED:
                objs = self._store.get(ns)
                if objs is not None:
                    objs.pop(name, None)
                    if not objs:
                        del self._store[ns]
            else:
                self._store.setdefault(ns, {})[name] = obj
            self._rv = resource_version(obj) or self._rv
        self._notify(event_type, obj)

    def _apply_transform(self, obj: Obj) -> Obj:
        return self._transform(obj) if self._transform else obj

    def _notify(self, event_type: str, obj: Obj) -> None:
        with self._dispatch:
            with self._lock:
                handlers = tuple(self._handlers)
            for handler in handlers:
                self._call(handler, event_type, obj)

    def _call(self, handler: Handler, event_type: str, obj: Obj) -> None:
        try:
            handler(event_type, obj)
        except Exception:
            log.exception("%s: handler %r failed on %s %s/%s", self.resource.plural,
                          handler, event_type, *key_of(obj))

