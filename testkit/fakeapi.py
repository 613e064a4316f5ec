"""One in-memory Kubernetes API for unit tests, and a watch cache over it.

Objects are kept by their path (`Resource.path(namespace, name)`), so a test
can seed and read them with the same paths the code under test requests. The
REST surface is `kube.rest.Rest`'s: get (object, collection with an equality
label selector, API group discovery), create, replace (resourceVersion
precondition), JSON patch (applied by the `jsonpatch` library, a failed `test`
op answered 422 as the API server does), merge patch, server-side apply
(list-maps keyed by `type`, as `conditions` are) and delete (uid and
resourceVersion preconditions; the last state kept as the watch's DELETED
event carries it).

What a test controls:
- `requests`: every call as (verb, path), in order; `calls` and `writes()`
  give them as (verb, "plural[/subresource]").
- `fail_next[verb]` fails the next call of that verb, `fail_always[verb]`
  every call; `before_next[verb]` runs once just before the next call of that
  verb is applied (another client writing in between our read and write).
- `unrecorded()`: calls made inside are neither recorded nor hooked (the test
  acting as another client).
- `FakeCache`s see the store only when the test calls `deliver()`, so a test
  decides exactly how stale they are.
- `unreachable()` fails every call as a dropped connection does, until
  `reachable()`.

Calls are serialized by one lock, as the API server serializes writes to an
object, so threads (leader candidates racing for a Lease) may share one fake.

The api tier runs the same scenarios against a real kube-apiserver; this fake
does not validate objects, run admission or finalizers, or collect garbage
unless asked (`collect_garbage`).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import jsonpatch

from raykueue.kube.resources import Resource
from raykueue.kube.rest import ApiError

Obj = dict[str, Any]
VERBS = ("get", "create", "replace", "patch", "apply", "delete")
CREATED_AT = "2026-12-02T09:40:13Z"
DELETED_AT = "2026-12-02T09:45:00Z"


class Request(NamedTuple):
    verb: str
    path: str

    @property
    def resource(self) -> str:
        """"plural" or "plural/subresource"."""
        target = parse(self.path)
        return target.plural + (f"/{target.sub}" if target.sub else "")


@dataclass(frozen=True, slots=True)
class Target:
    """A request path taken apart: /api/v1 or /apis/<group>/<version>, then
    [namespaces/<ns>/]<plural>[/<name>[/<subresource>]]."""

    prefix: str
    namespace: str
    plural: str
    name: str
    sub: str | None

    @property
    def collection(self) -> str:
        ns = f"/namespaces/{self.namespace}" if self.namespace else ""
        return f"{self.prefix}{ns}/{self.plural}"

    @property
    def key(self) -> str:
        """The object's path, without any subresource: its key in the store."""
        return f"{self.collection}/{self.name}"


def parse(path: str) -> Target:
    parts = path.strip("/").split("/")
    split = 2 if parts[0] == "api" else 3
    prefix, rest = "/" + "/".join(parts[:split]), parts[split:]
    ns = ""
    if rest[0] == "namespaces" and len(rest) > 2:
        ns, rest = rest[1], rest[2:]
    return Target(prefix, ns, rest[0], rest[1] if len(rest) > 1 else "",
                  rest[2] if len(rest) > 2 else None)


def _not_found(path: str) -> ApiError:
    return ApiError(404, "NotFound", {"reason": "NotFound", "message": f"{path} not found"})


def _conflict(message: str) -> ApiError:
    return ApiError(409, "Conflict", {"reason": "Conflict", "message": message})


def merge_patch(doc: Any, patch: Any) -> Any:
    """RFC 7386: objects merge, null deletes, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(doc) if isinstance(doc, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _apply_merge(doc: Any, applied: Any) -> Any:
    """Server-side apply, as far as tests need it: maps merge, lists of
    objects with a `type` merge by it (conditions), other values replace."""
    if isinstance(applied, Mapping) and isinstance(doc, Mapping):
        out = dict(doc)
        for key, value in applied.items():
            out[key] = _apply_merge(doc.get(key), value)
        return out
    if (isinstance(applied, list) and isinstance(doc, list)
            and all(isinstance(x, Mapping) and "type" in x for x in applied)):
        merged = [copy.deepcopy(x) for x in doc]
        for entry in applied:
            at = next((i for i, x in enumerate(merged)
                       if isinstance(x, Mapping) and x.get("type") == entry["type"]), None)
            if at is None:
                merged.append(copy.deepcopy(dict(entry)))
            else:
                merged[at] = copy.deepcopy(dict(entry))
        return merged
    return copy.deepcopy(applied)


def selector_matches(selector: str | None, obj: Obj) -> bool:
    """Equality-based label selector: "k=v,k2=v2"."""
    have = obj.get("metadata", {}).get("labels") or {}
    for term in (selector or "").split(","):
        if term:
            key, _, value = term.partition("=")
            if have.get(key) != value.lstrip("="):
                return False
    return True


def _serialized(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: FakeApi, *args: Any, **kw: Any) -> Any:
        with self._lock:
            return method(self, *args, **kw)
    return call


class FakeApi:
    """Objects by path, with the API server's concurrency rules."""

    def __init__(self, resources: Iterable[Resource] = (),
                 groups: Mapping[str, list[str]] | None = None) -> None:
        self.resources = {res.plural: res for res in resources}  # for the plural shortcuts
        self.groups = dict(groups or {})  # API group -> versions served, preferred first
        self.objects: dict[str, Obj] = {}
        self.tombstones: dict[str, Obj] = {}  # last state of deleted objects
        self.requests: list[Request] = []
        self.fail_next: dict[str, ApiError] = {}
        self.fail_always: dict[str, ApiError] = {}
        self.before_next: dict[str, Callable[[], None]] = {}
        self.caches: list[FakeCache] = []
        self._recording = True
        self._lock = threading.RLock()  # re-entrant: a `before_next` hook calls in again
        self._rv = itertools.count(5000)
        self._uid = itertools.count(1)

    # -- seeding and reading, unrecorded ----------------------------------------------

    def path_of(self, plural: str, namespace: str | None, name: str) -> str:
        res = self.resources[plural]
        return res.path((namespace or None) if res.namespaced else None, name)

    def store(self, path: str, obj: Obj) -> Obj:
        """Write `obj` at `path` as the API server would: new resourceVersion,
        a uid if it has none. Returns a copy of what is stored."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(next(self._rv))
        meta.setdefault("uid", f"fake-uid-{next(self._uid)}")
        self.objects[path] = obj
        return copy.deepcopy(obj)

    def put(self, plural: str, obj: Obj) -> Obj:
        meta = obj["metadata"]
        return self.store(self.path_of(plural, meta.get("namespace"), meta["name"]), obj)

    def get_obj(self, plural: str, namespace: str, name: str) -> Obj | None:
        return self.objects.get(self.path_of(plural, namespace, name))

    def remove(self, plural: str, namespace: str, name: str) -> None:
        self.objects.pop(self.path_of(plural, namespace, name), None)

    def of(self, plural: str) -> list[Obj]:
        return [obj for path, obj in self.objects.items() if parse(path).plural == plural]

    def deliver(self) -> None:
        """Every cache catches up with the store (the watches deliver)."""
        for cache in self.caches:
            cache.sync()

    @property
    def calls(self) -> list[tuple[str, str]]:
        return [(req.verb, req.resource) for req in self.requests]

    def writes(self) -> list[tuple[str, str]]:
        return [call for call in self.calls if call[0] != "get"]

    def unreachable(self, error: ApiError | None = None) -> None:
        """Every call fails (a dropped connection, by default) until `reachable()`."""
        error = error or ApiError(0, "ConnectionRefusedError")
        self.fail_always = {verb: error for verb in VERBS}

    def reachable(self) -> None:
        self.fail_always = {}

    @contextlib.contextmanager
    def unrecorded(self) -> Iterator[None]:
        self._recording, before = False, self._recording
        try:
            yield
        finally:
            self._recording = before

    def collect_garbage(self) -> None:
        """What the garbage collector does: drop objects whose owners are all gone."""
        uids = {obj["metadata"].get("uid") for obj in self.objects.values()}
        for path, obj in list(self.objects.items()):
            refs = obj["metadata"].get("ownerReferences") or []
            if refs and not any(ref.get("uid") in uids for ref in refs):
                del self.objects[path]

    # -- the REST surface -------------------------------------------------------------

    def _begin(self, verb: str, path: str) -> Target:
        if not self._recording:
            return parse(path)
        self.requests.append(Request(verb, path))
        hook = self.before_next.pop(verb, None)
        if hook is not None:
            hook()
        err = self.fail_always.get(verb) or self.fail_next.pop(verb, None)
        if err is not None:
            raise err
        return parse(path)

    def _current(self, target: Target) -> Obj:
        obj = self.objects.get(target.key)
        if obj is None:
            raise _not_found(target.key)
        return obj

    @_serialized
    def get(self, path: str, query: Mapping[str, Any] | None = None, **_: Any) -> Any:
        group = path.removeprefix("/apis/")
        if path.startswith("/apis/") and "/" not in group:
            return self._discovery(group)
        target = self._begin("get", path)
        if target.name:
            return copy.deepcopy(self._current(target))
        selector = (query or {}).get("labelSelector")
        items = [copy.deepcopy(obj) for key, obj in self.objects.items()
                 if _in_collection(parse(key), target) and selector_matches(selector, obj)]
        return {"kind": "List", "items": items, "metadata": {"resourceVersion": str(next(self._rv))}}

    def _discovery(self, group: str) -> Obj:
        versions = self.groups.get(group)
        if not versions:
            raise _not_found(f"/apis/{group}")
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"kind": "APIGroup", "name": group, "versions": entries,
                "preferredVersion": entries[0]}

    @_serialized
    def create(self, path: str, body: Mapping[str, Any], query: Any = None, **_: Any) -> Any:
        target = self._begin("create", path)
        obj = copy.deepcopy(dict(body))
        meta = obj.setdefault("metadata", {})
        key = f"{target.collection}/{meta['name']}"
        if key in self.objects:
            raise ApiError(409, "AlreadyExists", {"reason": "AlreadyExists",
                                                  "message": f"{meta['name']} already exists"})
        if target.namespace:
            meta.setdefault("namespace", target.namespace)
        meta.pop("uid", None)
        meta["generation"] = 1
        meta["creationTimestamp"] = CREATED_AT
        return self.store(key, obj)

    @_serialized
    def replace(self, path: str, body: Mapping[str, Any], **_: Any) -> Any:
        target = self._begin("replace", path)
        current = self._current(target)
        obj = copy.deepcopy(dict(body))
        rv = obj.get("metadata", {}).get("resourceVersion")
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise _conflict("the object has been modified; please apply your changes to the "
                            "latest version and try again")
        obj.setdefault("metadata", {})["uid"] = current["metadata"].get("uid")
        return self.store(target.key, obj)

    @_serialized
    def json_patch(self, path: str, ops: list[dict[str, Any]], query: Any = None,
                   **_: Any) -> Any:
        target = self._begin("patch", path)
        current = self._current(target)
        try:
            patched = jsonpatch.apply_patch(current, ops)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            raise ApiError(422, "Invalid", {"reason": "Invalid", "message": str(exc)}) from exc
        return self.store(target.key, patched)

    @_serialized
    def merge_patch(self, path: str, patch: Mapping[str, Any], query: Any = None,
                    **_: Any) -> Any:
        target = self._begin("patch", path)
        return self.store(target.key, merge_patch(self._current(target), patch))

    @_serialized
    def apply(self, path: str, body: Mapping[str, Any], field_manager: str, force: bool = True,
              **_: Any) -> Any:
        target = self._begin("apply", path)
        assert field_manager, "server-side apply needs a field manager"
        current = self._current(target)
        applied: Mapping[str, Any] = body
        if target.sub:  # a subresource write changes only that part
            applied = {target.sub: body.get(target.sub) or {}}
        return self.store(target.key, _apply_merge(current, applied))

    @_serialized
    def delete(self, path: str, body: Mapping[str, Any] | None = None, query: Any = None,
               **_: Any) -> Any:
        target = self._begin("delete", path)
        current = self._current(target)
        pre = (body or {}).get("preconditions") or {}
        meta = current["metadata"]
        if pre.get("uid") and pre["uid"] != meta.get("uid"):
            raise _conflict(f"Precondition failed: UID in precondition: {pre['uid']}, "
                            f"UID in object meta: {meta.get('uid')}")
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
            raise _conflict("Precondition failed: ResourceVersion")
        # Gone at once, as on kwok's nodes.
        del self.objects[target.key]
        last = copy.deepcopy(current)
        last["metadata"]["deletionTimestamp"] = DELETED_AT
        last["metadata"]["deletionGracePeriodSeconds"] = 0
        self.tombstones[target.key] = last
        return {"kind": "Status", "status": "Success"}

    # -- caches ---------------------------------------------------------------------------

    def cache_factory(self, rest: Any, resource: Resource, *, namespace: str | None = None,
                      label_selector: str | None = None,
                      transform: Callable[[Obj], Obj] | None = None) -> FakeCache:
        """Signature of `kube.cache.WatchCache`, for code that takes a factory."""
        cache = FakeCache(self, resource, namespace, label_selector, transform)
        self.caches.append(cache)
        return cache


def _in_collection(obj: Target, collection: Target) -> bool:
    return (obj.prefix == collection.prefix and obj.plural == collection.plural
            and collection.namespace in ("", obj.namespace))


class FakeCache:
    """A watch cache that syncs from a FakeApi only when told to."""

    def __init__(self, api: FakeApi, resource: Resource, namespace: str | None,
                 selector: str | None, transform: Callable[[Obj], Obj] | None) -> None:
        self.api = api
        self.resource = resource
        self.plural = resource.plural
        self._collection = parse(resource.path(namespace))
        self.selector = selector
        self.transform = transform
        self.store: dict[tuple[str, str], Obj] = {}
        self.handlers: list[Callable[[str, Obj], None]] = []
        self.synced = False

    def start(self) -> FakeCache:
        self.sync()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        pass

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self.synced

    def get(self, namespace: str | None, name: str) -> Obj | None:
        return self.store.get((namespace or "", name))

    def list(self, namespace: str | None = None) -> list[Obj]:
        return [o for (ns, _), o in self.store.items() if namespace in (None, ns)]

    def add_handler(self, fn: Callable[[str, Obj], None]) -> None:
        self.handlers.append(fn)

    def _view(self, obj: Obj) -> Obj:
        copied = copy.deepcopy(obj)
        return self.transform(copied) if self.transform else copied

    def sync(self) -> None:
        """Catch up with the store, calling handlers as a watch would."""
        fresh: dict[tuple[str, str], Obj] = {}
        for path, obj in self.api.objects.items():
            target = parse(path)
            if _in_collection(target, self._collection) and selector_matches(self.selector, obj):
                fresh[(target.namespace, target.name)] = self._view(obj)
        events: list[tuple[str, Obj]] = []
        for key, obj in fresh.items():
            old = self.store.get(key)
            if old is None:
                events.append(("ADDED", obj))
            elif old["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]:
                events.append(("MODIFIED", obj))
        for key, obj in self.store.items():
            if key not in fresh:
                last = self.api.tombstones.get(self.resource.path(key[0] or None, key[1]))
                events.append(("DELETED", self._view(last) if last is not None else obj))
        self.store = fresh
        self.synced = True
        for event, obj in events:
            for handler in self.handlers:
                handler(event, obj)
