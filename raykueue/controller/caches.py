"""The controller's six watch caches, and what they keep of each object."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, Protocol

import orjson

from raykueue.controller import pods as p
from raykueue.controller import workload as w
from raykueue.controller import workload_match as wm
from raykueue.controller.config import ControllerConfig
from raykueue.core import contract as c
from raykueue.core.objects import METADATA_KEPT, labels
from raykueue.core.rayobjects import slim_raycluster
from raykueue.kube import resources as r
from raykueue.kube.informers import Informers
from raykueue.kube.rest import Rest

log = logging.getLogger("raykueue.controller")

Handler = Callable[[str, dict[str, Any]], None]


class Cache(Protocol):
    synced: bool

    def start(self) -> Any: ...
    def stop(self, timeout: float = 5.0) -> None: ...
    def wait_synced(self, timeout: float | None = None) -> bool: ...
    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None: ...
    def list(self, namespace: str | None = None) -> list[dict[str, Any]]: ...
    def add_handler(self, fn: Handler) -> None: ...


CacheFactory = Callable[..., Cache]


RAYCLUSTERS: Final = r.crd(c.RAY_API_GROUP, "v1", "rayclusters")


def workload_resource(version: str) -> r.Resource:
    return r.crd(c.KUEUE_GROUP, version, "workloads")


def kueue_resource(version: str, plural: str, *, namespaced: bool = True) -> r.Resource:
    return r.crd(c.KUEUE_GROUP, version, plural, namespaced=namespaced)


def discover_version(rest: Rest) -> str | None:
    """v1beta2 where served, else v1beta1; None while Kueue's CRDs are absent."""
    served = r.served_versions(rest, c.KUEUE_GROUP)
    for version in w.VERSIONS:
        if version in served:
            return version
    return None


# What the controller's decisions read (`decide`, `gang.decide`, `placement`,
# `stuck`, the handlers' writes and Events) of each cached kind; the transforms
# below keep exactly this on arrival. tests/unit/controller/test_trim.py runs
# the decisions on trimmed and whole objects and expects the same answer.
# Of metadata: core.objects.METADATA_KEPT, as every cache of ours; of a RayCluster,
# core.rayobjects.slim_raycluster, the admission side's transform too.
# Of a pod's spec: the gate, and the placement a gate lift adds to.
# nodeName and each container's state kind: whether a pod being deleted has stopped
# (release.release holds its quota until then).
POD_SPEC_KEPT: Final = ("schedulingGates", "nodeSelector", "tolerations", "nodeName")
POD_STATUS_KEPT: Final = ("phase", "message")
POD_CONDITIONS_KEPT: Final = frozenset({"Ready"})
# Of a Workload's status: Kueue's verdict, its placement and our own entries.
WORKLOAD_STATUS_KEPT: Final = ("conditions", "admission", "admissionChecks", "reclaimablePods")


# A resourceVersion is one object's and changes with every write: interned, each
# would add an entry to the interpreter's table of interned strings and save no
# copy. Names, uids and timestamps do repeat (a Workload's owner is its pod; ten
# objects a second share a timestamp), and interning them measured smaller.
_NOT_INTERNED: Final = frozenset({"resourceVersion"})


def _pick(obj: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(obj, dict):
        return {}
    return {k: _interned(obj[k], k) for k in keys if k in obj}


def _interned(value: Any, key: str = "") -> Any:
    """Thousands of objects repeat the same label values, reasons and messages:
    one copy of each string instead of one per object."""
    if isinstance(value, str):
        return value if key in _NOT_INTERNED else sys.intern(value)
    if isinstance(value, dict):
        return {sys.intern(k): _interned(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_interned(v, key) for v in value]
    return value


class _Shared:
    """One copy of each value that many objects repeat: a Ray cluster's workers
    carry the same labels, owner reference, tolerations and conditions, and
    their Workloads the same spec and admission. Cached objects are read-only
    (kube.cache), so sharing a value between them is safe.

    The table holds each distinct value once; should values turn out to be
    mostly distinct it starts over rather than grow without bound.
    """

    def __init__(self, limit: int = 4096) -> None:
        self._limit = limit
        self._values: dict[bytes, Any] = {}
        self._lock = threading.Lock()  # one watch thread per cache, two caches

    def __call__(self, value: Any) -> Any:
        if not isinstance(value, dict | list) or not value:
            return value
        key = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        with self._lock:
            found = self._values.get(key)
            if found is None:
                if len(self._values) >= self._limit:
                    self._values.clear()
                found = self._values[key] = value
        return found


_shared = _Shared()
# Fields that repeat across a cluster's pods and their Workloads.
_POD_META_SHARED: Final = ("labels", "annotations", "ownerReferences")


def _kind_and_meta(obj: dict[str, Any], shared: tuple[str, ...] = ()) -> dict[str, Any]:
    # kind and apiVersion: Events about the object reference it by them.
    out = {k: sys.intern(obj[k]) for k in ("apiVersion", "kind") if isinstance(obj.get(k), str)}
    meta = _pick(obj.get("metadata"), METADATA_KEPT)
    for k in shared:
        if k in meta:
            meta[k] = _shared(meta[k])
    out["metadata"] = meta
    return out


def slim_workload(obj: dict[str, Any]) -> wm.SlimWorkload:
    """Cache transform: of a Workload, its metadata, its spec without pod templates
    (whether they ask for what the pod asks for is all we need of those, and the
    result carries that), and the status fields above."""
    if isinstance(obj, wm.SlimWorkload):
        return obj
    out = _kind_and_meta(obj)
    wl_spec = obj.get("spec")
    if isinstance(wl_spec, dict):
        kept = {k: v for k, v in wl_spec.items() if k != "podSets"}
        pod_sets = wl_spec.get("podSets")
        if isinstance(pod_sets, list):
            kept["podSets"] = [{k: v for k, v in x.items() if k != "template"}
                               if isinstance(x, dict) else x for x in pod_sets]
        out["spec"] = _shared(_interned(kept))
    if "status" in obj:
        status = _pick(obj.get("status"), WORKLOAD_STATUS_KEPT)
        if "admission" in status:
            status["admission"] = _shared(status["admission"])
        out["status"] = status
    return wm.SlimWorkload(out, wm.pod_sets_fingerprint(obj))


def slim_pod(obj: dict[str, Any]) -> p.SlimPod:
    """Cache transform: of a pod, its metadata, gate, placement, phase and
    readiness; its whole spec only as JSON and only while a Workload may still be
    built from it (see `p.SlimPod`). Container specs, volumes and container
    statuses, most of a pod's bytes, are read by nothing here."""
    if isinstance(obj, p.SlimPod):
        return obj
    out = _kind_and_meta(obj, _POD_META_SHARED)
    full = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    out["spec"] = _shared(_pick(full, POD_SPEC_KEPT))
    status = obj.get("status")
    if isinstance(status, dict):
        kept = _pick(status, POD_STATUS_KEPT)
        conds = status.get("conditions")
        if isinstance(conds, list):
            kept["conditions"] = _shared([
                _pick(x, ("type", "status")) for x in conds
                if isinstance(x, dict) and x.get("type") in POD_CONDITIONS_KEPT])
        states = status.get("containerStatuses")
        if isinstance(states, list):
            kept["containerStatuses"] = [
                {"state": {kind: {} for kind in x["state"]}} for x in states
                if isinstance(x, dict) and isinstance(x.get("state"), dict)]
        out["status"] = kept
    buildable = p.is_gated(obj) or bool(labels(obj).get(c.GANG_LABEL))
    return p.SlimPod(out, wm.pod_sizing(obj), orjson.dumps(full) if buildable else None)


# Of a head pod that may not be ours: whether it is past every gate and alive.
HEAD_SPEC_KEPT: Final = ("schedulingGates",)
HEAD_STATUS_KEPT: Final = ("phase",)


def slim_head(obj: dict[str, Any]) -> dict[str, Any]:
    """Cache transform for every Ray head pod: who it is and whether it runs.

    A head raykueue did not create (the opt-in came later, or raykueue was
    installed while the cluster ran) has none of our labels; its workers still
    wait for it. That is all the controller asks of it.
    """
    out = _kind_and_meta(obj, _POD_META_SHARED)
    out["spec"] = _pick(obj.get("spec"), HEAD_SPEC_KEPT)
    out["status"] = _pick(obj.get("status"), HEAD_STATUS_KEPT)
    return out


def foreign_heads(heads: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Head pods without raykueue's label: ours are in the pod cache already."""
    return [x for x in heads if labels(x).get(c.MANAGED_BY_LABEL) != c.MANAGED_BY_VALUE]
@dataclass(frozen=True, slots=True)
class Caches:
    pods: Cache  # ours only, by the managed-by label
    workloads: Cache  # all, not just ours: one Kueue made for our pod is a conflict
    flavors: Cache
    priority_classes: Cache
    heads: Cache  # every Ray head pod, ours or not (ray.io/node-type=head): one per cluster
    rayclusters: Cache  # a gang's base follows its worker groups' minReplicas

    @classmethod
    def open(cls, rest: Rest, config: ControllerConfig, version: str,
             make: CacheFactory, shared: Informers | None = None) -> Caches:
        """Build the caches (not started: handlers go on first). A watch the process
        already runs (`shared`: the admission side's RayClusters) is borrowed, not
        opened a second time; its loan's stop takes the controller's handlers off."""
        ns = config.namespace
        rayclusters = shared.borrow(RAYCLUSTERS, namespace=ns, transform=slim_raycluster) \
            if shared is not None else None
        return cls(
            pods=make(rest, r.PODS, namespace=ns,
                      label_selector=f"{c.MANAGED_BY_LABEL}={c.MANAGED_BY_VALUE}",
                      transform=slim_pod),
            workloads=make(rest, workload_resource(version), namespace=ns,
                           transform=slim_workload),
            flavors=make(rest, kueue_resource(version, "resourceflavors", namespaced=False)),
            priority_classes=make(rest, kueue_resource(version, "workloadpriorityclasses",
                                                       namespaced=False)),
            heads=make(rest, r.PODS, namespace=ns,
                       label_selector=f"{c.NODE_TYPE_LABEL}={c.ROLE_HEAD}", transform=slim_head),
            rayclusters=rayclusters or make(rest, RAYCLUSTERS, namespace=ns,
                                            transform=slim_raycluster),
        )

    @property
    def all(self) -> tuple[Cache, ...]:
        return (self.pods, self.workloads, self.flavors, self.priority_classes, self.heads,
                self.rayclusters)

    def start(self) -> None:
        for cache in self.all:
            cache.start()

    def stop(self) -> None:
        for cache in self.all:
            cache.stop()

    def wait_synced(self, stop: threading.Event, timeout: float) -> bool:
        """True once every cache but the RayClusters' holds its initial list; False if
        `stop` came first. Without KubeRay's CRD the controller still runs: a gang's
        base counts then come from what the webhook stamped on its pods."""
        deadline = time.monotonic() + timeout
        while not stop.is_set():
            if all(cache.wait_synced(0.2) for cache in self.all if cache is not self.rayclusters):
                return True
            if time.monotonic() > deadline:
                log.warning("caches not synced after %.0fs; still waiting", timeout)
                deadline = time.monotonic() + timeout
        return False
