"""Invariants of raykueue beside Kueue as shipped, watched for a whole scenario.

`Invariants(admin, ns)` watches the namespace's pods, Workloads and Ray objects
from the start of a test to its end (watch caches, so every change is seen, not
a sample), and records each moment one of these fails:

- Kueue made a Workload for an opted-in Ray object (a Workload owned by a
  RayCluster, RayJob or RayService whose `standalone` annotation is "true");
- Kueue suspended an opted-in Ray object;
- an opted-in pod carries Kueue's `managed` label or gate (Kueue counts it);
- a pod of an opted-in cluster (the stamp `raykueue.io/opted-in` from its
  template) is not raykueue's: one cluster, one admission regime;
- a raykueue Workload is Finished by Kueue (`OwnerNotFound`), or deleted while
  its pod is alive and not being deleted.

It also counts pod and Workload creations and deletions, for the soak figures.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.kube import resources as r
from raykueue.kube.cache import WatchCache
from raykueue.kube.rest import ApiError, Rest

WORKLOADS = r.crd(c.KUEUE_GROUP, "v1beta2", "workloads")
RAY = {kind: r.crd(c.RAY_API_GROUP, "v1", kind.lower() + "s")
       for kind in (c.RAYCLUSTER_KIND, c.RAYJOB_KIND, c.RAYSERVICE_KIND)}
_SUSPEND = {c.RAYCLUSTER_KIND: ("spec", "suspend"), c.RAYJOB_KIND: ("spec", "suspend"),
            c.RAYSERVICE_KIND: ("spec", "rayClusterConfig", "suspend")}


def _get(obj: dict[str, Any], path: tuple[str, ...]) -> Any:
    for part in path:
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def opted_in(obj: dict[str, Any]) -> bool:
    return (obj.get("metadata", {}).get("annotations") or {}).get(c.STANDALONE_ANNOTATION) == "true"


class Invariants:
    def __init__(self, admin: Rest, ns: str) -> None:
        self.admin, self.ns = admin, ns
        self.violations: list[str] = []
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._seen_opted_in: set[str] = set()  # uids of opted-in Ray objects
        self.caches = [WatchCache(admin, r.PODS, namespace=ns), WatchCache(admin, WORKLOADS, namespace=ns)]
        self.caches += [WatchCache(admin, res, namespace=ns) for res in RAY.values()]
        self.caches[0].add_handler(self._pod)
        self.caches[1].add_handler(self._workload)
        for kind, cache in zip(RAY, self.caches[2:], strict=True):
            cache.add_handler(lambda t, o, kind=kind: self._ray(kind, t, o))

    def __enter__(self) -> Invariants:
        for cache in self.caches:
            cache.start()
        for cache in self.caches:
            assert cache.wait_synced(30), f"watch of {cache.resource.plural} in {self.ns} never synced"
        return self

    def __exit__(self, *exc: object) -> None:
        for cache in self.caches:
            cache.stop()

    def _fail(self, what: str) -> None:
        with self._lock:
            self.violations.append(what)

    def _ray(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        if not opted_in(obj):
            return
        self._seen_opted_in.add(obj["metadata"]["uid"])
        if event != "DELETED" and _get(obj, _SUSPEND[kind]) is True:
            self._fail(f"{kind} {obj['metadata']['name']} was suspended")
        if c.QUEUE_LABEL in (obj["metadata"].get("labels") or {}):
            self._fail(f"{kind} {obj['metadata']['name']} carries {c.QUEUE_LABEL}")

    def _opted_in_owner(self, ref: dict[str, Any]) -> bool:
        if ref.get("uid") in self._seen_opted_in:
            return True
        try:  # the Ray object's own watch may not have delivered it yet
            return opted_in(self.admin.get(RAY[ref["kind"]].path(self.ns, ref["name"])))
        except ApiError:
            return False

    def _pod(self, event: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        self.counts[f"pods {event.lower()}"] += 1
        labels = meta.get("labels") or {}
        ours = labels.get(c.MANAGED_BY_LABEL) == c.MANAGED_BY_VALUE
        if labels.get(c.OPTED_IN_LABEL) == c.OPTED_IN_VALUE and not ours and event == "ADDED":
            self._fail(f"pod {meta['name']} of an opted-in cluster is not raykueue's")
        if not ours:
            return
        gates = [g.get("name") for g in pod["spec"].get("schedulingGates") or []]
        if (meta.get("labels") or {}).get(c.KUEUE_MANAGED_LABEL) == "true" or c.KUEUE_POD_GATE in gates:
            self._fail(f"pod {meta['name']} is raykueue's and Kueue's at once")

    def _workload(self, event: str, wl: dict[str, Any]) -> None:
        meta = wl["metadata"]
        self.counts[f"workloads {event.lower()}"] += 1
        for ref in meta.get("ownerReferences") or []:
            # A gang's base is raykueue's own, owned by its RayCluster (docs/GANG.md).
            if w.is_ours(wl):
                break
            if ref.get("kind") in RAY and event == "ADDED" and self._opted_in_owner(ref):
                self._fail(f"Kueue made Workload {meta['name']} for opted-in {ref['kind']} {ref['name']}")
        if not w.is_ours(wl):
            return
        finished = w.condition(wl, w.FINISHED) or {}
        if finished.get("status") == "True" and finished.get("reason") == "OwnerNotFound":
            self._fail(f"Kueue finished Workload {meta['name']}: {finished.get('message')}")
        if event == "DELETED":
            owner = w.owner_pod(wl)
            if owner is None:
                return
            try:
                pod = self.admin.get(r.PODS.path(self.ns, owner[0]))
            except ApiError as exc:
                if exc.is_not_found:
                    return
                raise
            if (pod["metadata"].get("labels") or {}).get(c.GANG_LABEL):
                return  # an extra moved into its gang's base (tests/e2e/test_gang.py checks cover)
            if pod["metadata"]["uid"] == owner[1] and not pod["metadata"].get("deletionTimestamp"):
                self._fail(f"Workload {meta['name']} was deleted while its pod {owner[0]} lives")

    def assert_held(self) -> None:
        with self._lock:
            assert not self.violations, "invariants broken:\n" + "\n".join(self.violations)
