"""An in-memory API server and watch caches for the controller loop's tests.

Only what the loop uses: create, JSON patch (add/remove/test), server-side
apply of status conditions (merged by type, as the real list-map is), delete
with a uid precondition, get, and discovery. Caches see the store only when
the test calls `deliver()`, so a test decides exactly how stale they are.
The api tier runs the same scenarios against a real kube-apiserver.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from typing import Any

from kube.rest import ApiError

Obj = dict[str, Any]


def _unescape(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")


def apply_json_patch(doc: Obj, ops: list[Obj]) -> Obj:
    doc = copy.deepcopy(doc)
    for op in ops:
        parts = [_unescape(x) for x in op["path"].split("/")[1:]]
        parent: Any = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last = parts[-1]
        if op["op"] == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if current != op["value"]:
                raise ApiError(422, "Invalid", {"message": f"test failed at {op['path']}"})
        elif op["op"] == "remove":
            if isinstance(parent, list):
                parent.pop(int(last))
            else:
                del parent[last]
        elif op["op"] == "add":
            if isinstance(parent, list):
                if last == "-":
                    parent.append(op["value"])
                else:
                    parent.insert(int(last), op["value"])
            else:
                parent[last] = op["value"]
        else:
            raise AssertionError(f"unsupported op {op}")
    return doc


class World:
    """Objects by (plural, namespace, name); `calls` logs every request."""

    def __init__(self, version: str = "v1beta2") -> None:
        self.version = version
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self.calls: list[tuple[str, str]] = []
        self.caches: list[FakeCache] = []
        self.tombstones: dict[tuple[str, str, str], Obj] = {}
        self.fail_next: dict[str, ApiError] = {}  # verb -> error for its next call
        self._rv = itertools.count(5000)
        self._uid = itertools.count(1)

    # -- seeding -------------------------------------------------------------------

    def put(self, plural: str, obj: Obj) -> Obj:
        obj = copy.deepcopy(obj)
        meta = obj["metadata"]
        meta["resourceVersion"] = str(next(self._rv))
        meta.setdefault("uid", f"world-uid-{next(self._uid)}")
        self.objects[(plural, meta.get("namespace") or "", meta["name"])] = obj
        return obj

    def get_obj(self, plural: str, ns: str, name: str) -> Obj | None:
        return self.objects.get((plural, ns, name))

    def remove(self, plural: str, ns: str, name: str) -> None:
        self.objects.pop((plural, ns, name), None)

    def of(self, plural: str) -> list[Obj]:
        return [o for (p, _, _), o in self.objects.items() if p == plural]

    def deliver(self) -> None:
        for cache in self.caches:
            cache.sync()

    def writes(self) -> list[tuple[str, str]]:
        return [call for call in self.calls if call[0] != "get"]

    # -- the REST surface --------------------------------------------------------------

    def _route(self, path: str) -> tuple[str, str, str, str | None]:
        parts = path.strip("/").split("/")
        # /api/v1/... for the core group, /apis/<group>/<version>/... otherwise
        parts = parts[2:] if parts[0] == "api" else parts[3:]
        ns = ""
        if parts[0] == "namespaces":
            ns, parts = parts[1], parts[2:]
        plural = parts[0]
        name = parts[1] if len(parts) > 1 else ""
        sub = parts[2] if len(parts) > 2 else None
        return plural, ns, name, sub

    def _log(self, verb: str, path: str) -> None:
        plural, _, _, sub = self._route(path)
        self.calls.append((verb, plural + (f"/{sub}" if sub else "")))
        err = self.fail_next.pop(verb, None)
        if err is not None:
            raise err

    def get(self, path: str, query: Any = None, **_: Any) -> Any:
        if path == "/apis/kueue.x-k8s.io":
            return {"kind": "APIGroup", "name": "kueue.x-k8s.io",
                    "versions": [{"groupVersion": f"kueue.x-k8s.io/{self.version}",
                                  "version": self.version}],
                    "preferredVersion": {"version": self.version}}
        self._log("get", path)
        plural, ns, name, _ = self._route(path)
        if not name:
            selector = dict(part.split("=", 1) for part in
                            ((query or {}).get("labelSelector") or "").split(",") if part)
            items = [copy.deepcopy(o) for (pl, n, _), o in self.objects.items()
                     if pl == plural and n == ns and all(
                         (o["metadata"].get("labels") or {}).get(k) == v
                         for k, v in selector.items())]
            return {"kind": "List", "items": items, "metadata": {"resourceVersion": "1"}}
        obj = self.objects.get((plural, ns, name))
        if obj is None:
            raise ApiError(404, "NotFound", {"message": "not found"})
        return copy.deepcopy(obj)

    def create(self, path: str, body: Obj, query: Any = None, **_: Any) -> Any:
        self._log("create", path)
        plural, ns, _, _ = self._route(path)
        name = body["metadata"]["name"]
        if (plural, ns, name) in self.objects:
            raise ApiError(409, "AlreadyExists", {"message": f"{name} already exists"})
        obj = copy.deepcopy(body)
        obj["metadata"]["generation"] = 1
        obj["metadata"]["creationTimestamp"] = "2026-12-02T09:40:13Z"
        return copy.deepcopy(self.put(plural, obj))

    def json_patch(self, path: str, ops: list[Obj], query: Any = None, **_: Any) -> Any:
        self._log("patch", path)
        plural, ns, name, _ = self._route(path)
        obj = self.objects.get((plural, ns, name))
        if obj is None:
            raise ApiError(404, "NotFound", {"message": "not found"})
        return copy.deepcopy(self.put(plural, apply_json_patch(obj, ops)))

    def apply(self, path: str, body: Obj, field_manager: str, force: bool = True,
              **_: Any) -> Any:
        self._log("apply", path)
        assert force and field_manager
        plural, ns, name, sub = self._route(path)
        assert sub == "status", "the controller applies status only"
        obj = self.objects.get((plural, ns, name))
        if obj is None:
            raise ApiError(404, "NotFound", {"message": "not found"})
        obj = copy.deepcopy(obj)
        conds = obj.setdefault("status", {}).setdefault("conditions", [])
        for new in body["status"]["conditions"]:
            for i, old in enumerate(conds):
                if old["type"] == new["type"]:
                    conds[i] = new
                    break
            else:
                conds.append(new)
        return copy.deepcopy(self.put(plural, obj))

    def delete(self, path: str, body: Obj | None = None, query: Any = None, **_: Any) -> Any:
        self._log("delete", path)
        plural, ns, name, _ = self._route(path)
        obj = self.objects.get((plural, ns, name))
        if obj is None:
            raise ApiError(404, "NotFound", {"message": "not found"})
        want = ((body or {}).get("preconditions") or {}).get("uid")
        if want and want != obj["metadata"]["uid"]:
            raise ApiError(409, "Conflict", {"message": "Precondition failed: UID"})
        # As on kwok's nodes: gone at once. Owned objects stay until the test
        # calls collect_garbage(), as the real collector also lags.
        del self.objects[(plural, ns, name)]
        # The API server's DELETED event carries the last state, deletionTimestamp set.
        last = copy.deepcopy(obj)
        last["metadata"]["deletionTimestamp"] = "2026-12-02T09:45:00Z"
        last["metadata"]["deletionGracePeriodSeconds"] = 0
        self.tombstones[(plural, ns, name)] = last
        return {"kind": "Status", "status": "Success"}

    def collect_garbage(self) -> None:
        uids = {o["metadata"]["uid"] for o in self.objects.values()}
        for key, obj in list(self.objects.items()):
            refs = obj["metadata"].get("ownerReferences") or []
            if refs and not any(ref.get("uid") in uids for ref in refs):
                del self.objects[key]

    # -- caches --------------------------------------------------------------------

    def cache_factory(self, rest: Any, resource: Any, *, namespace: str | None = None,
                      label_selector: str | None = None,
                      transform: Callable[[Obj], Obj] | None = None) -> FakeCache:
        cache = FakeCache(self, resource.plural, label_selector, transform)
        self.caches.append(cache)
        return cache


class FakeCache:
    def __init__(self, world: World, plural: str, selector: str | None,
                 transform: Callable[[Obj], Obj] | None) -> None:
        self.world = world
        self.plural = plural
        self.selector = tuple(selector.split("=", 1)) if selector else None
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

    def _matches(self, obj: Obj) -> bool:
        if self.selector is None:
            return True
        key, value = self.selector
        return (obj["metadata"].get("labels") or {}).get(key) == value

    def sync(self) -> None:
        fresh = {}
        for (plural, ns, name), obj in self.world.objects.items():
            if plural == self.plural and self._matches(obj):
                copied = copy.deepcopy(obj)
                fresh[(ns, name)] = self.transform(copied) if self.transform else copied
        events = []
        for key, obj in fresh.items():
            old = self.store.get(key)
            if old is None:
                events.append(("ADDED", obj))
            elif old["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]:
                events.append(("MODIFIED", obj))
        for key, obj in self.store.items():
            if key not in fresh:
                last = self.world.tombstones.get((self.plural, *key))
                gone = copy.deepcopy(last) if last is not None else obj
                events.append(("DELETED", self.transform(gone) if self.transform else gone))
        self.store = fresh
        self.synced = True
        for event, obj in events:
            for handler in self.handlers:
                handler(event, obj)
