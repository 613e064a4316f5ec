"""The admission side's reads: owners, LocalQueues, PriorityClasses, namespaces.

The counterpart of controller/reads.py: it turns the caches it is given into
the `Context` and `Facts` the pure decisions (`classify`, `rayobjects`) take,
so `app/` only wires. Everything is read from watch-backed caches handed in as
arguments, so that answering a review does not wait on the API server. The one
exception is a stamped pod whose Ray owner the caches lack yet (a new cluster's
first moments, when KubeRay's watch is ahead of ours): its owner chain is read
live, once, by `context_live`, which the admission endpoint runs off the event
loop (never on the common path). Without a cluster the view is empty and the
webhook decides from the pod alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from raykueue.core import contract as c
from raykueue.core.objects import METADATA_KEPT, Obj, labels
from raykueue.core.rayobjects import ray_owner
from raykueue.core.selectors import namespace_labels
from raykueue.webhooks.classify import PodContext
from raykueue.webhooks.rayrules import NamespaceFacts

# RayCluster -> RayJob/RayService is as deep as KubeRay nests today; the bound
# guards against an ownership cycle written by hand.
_MAX_OWNER_DEPTH = 3


class Store(Protocol):
    synced: bool

    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None: ...


# (kind, namespace, name, timeout in seconds) -> the object, transformed as its
# cache transforms it, or None when the API server says it does not exist;
# raises on any other failure. Blocking I/O: called only off the event loop.
OwnerReader = Callable[[str, str, str, float], Obj | None]


class KueueSetup(Protocol):
    """What the reads ask of Kueue's setup as coexist/ reads it (coexist.kueueconfig)."""

    manage_jobs_without_queue_name: bool

    @property
    def ray_kinds(self) -> frozenset[str]: ...

    def manages_unqueued_in(self, namespace: Mapping[str, str]) -> bool: ...


def keep_metadata(kind: str):
    """Transform for owner caches but the RayClusters' (which keep the shape the
    controller reads too, core/rayobjects.slim_raycluster): kind and metadata."""

    def transform(obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        return {"kind": kind, "metadata": {k: meta[k] for k in METADATA_KEPT if k in meta}}

    return transform


def keep_labels(obj: dict[str, Any]) -> dict[str, Any]:
    """Transform for Namespaces: their labels are what Kueue's namespace selector reads."""
    meta = obj.get("metadata") or {}
    return {"metadata": {k: meta[k] for k in ("name", "resourceVersion", "labels") if k in meta}}


def keep_value(obj: dict[str, Any]) -> dict[str, Any]:
    """Transform for PriorityClasses: the name and the value are all we need."""
    meta = obj.get("metadata") or {}
    return {"metadata": {k: meta.get(k) for k in ("name", "resourceVersion")},
            "value": obj.get("value")}


_OFFLINE = PodContext()


class _Nothing:
    """A store before its cache exists: holds nothing, never synced."""

    synced = False

    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        return None


_NOTHING = _Nothing()


@dataclass(frozen=True, slots=True)
class _Stores:
    """What a view reads, swapped whole: a review in flight sees one set or the other."""

    owners: Mapping[str, Store]
    local_queues: Store | None
    priority_classes: Store | None
    # Kueue's setup as coexist/ reads it: which Ray kinds Kueue would admit whole.
    kueue: Callable[[], KueueSetup] | None
    namespaces: Store | None
    # Reads a Ray owner the caches lack, and the time one pod's reads may take in all.
    live: OwnerReader | None = None
    live_budget: float = 2.0
    # What a context built from these stores hands on as its `live` (None without a reader).
    reread: Callable[[Obj, str], PodContext] | None = None


class ClusterView:
    def __init__(
        self,
        owners: Mapping[str, Store],
        local_queues: Store | None,
        priority_classes: Store | None = None,
        kueue: Callable[[], KueueSetup] | None = None,
        namespaces: Store | None = None,
        live: OwnerReader | None = None,
        live_budget: float = 2.0,
    ) -> None:
        self.attach(owners, local_queues, priority_classes, kueue, namespaces, live, live_budget)

    @classmethod
    def offline(cls) -> ClusterView:
        return cls({}, None)

    @classmethod
    def connecting(cls) -> ClusterView:
        """A cluster is configured but not read yet: every owner is unknown, so a pod
        that a Ray object may opt in is refused (KubeRay retries) until `attach`."""
        owners = {kind: _NOTHING for kind in (c.RAYCLUSTER_KIND, c.RAYJOB_KIND, c.RAYSERVICE_KIND)}
        return cls(owners, _NOTHING)

    def attach(self, owners: Mapping[str, Store], local_queues: Store | None,
               priority_classes: Store | None = None, kueue: Callable[[], KueueSetup] | None = None,
               namespaces: Store | None = None, live: OwnerReader | None = None,
               live_budget: float = 2.0) -> None:
        """The caches (and the live reader), once the cluster answers (one assignment:
        reviews in flight see either set, never a mix)."""
        self._stores = _Stores(owners, local_queues, priority_classes, kueue, namespaces, live,
                               live_budget, self.context_live if live is not None else None)

    def context_for(self, pod: Obj, namespace: str) -> PodContext:
        """From the caches alone: the API server is not asked here."""
        stores = self._stores
        if stores.local_queues is None:
            return _OFFLINE
        chain, unresolved = _owner_chain(stores, pod, namespace, None)
        return _context(stores, namespace, chain, unresolved, live=stores.reread)

    def context_live(self, pod: Obj, namespace: str) -> PodContext:
        """The context with the owners the caches lack read from the API server (blocking).

        Run once for a pod whose decision hinged on the miss (`classify.OwnerUnread`),
        off the event loop. Each owner is taken from its cache when held there, else
        read live, within one budget for the whole chain. The context answered
        carries no `live`: a pod's owners are read live once.
        """
        stores = self._stores
        if stores.local_queues is None or stores.live is None:
            return _OFFLINE if stores.local_queues is None else self.context_for(pod, namespace)
        reads = _LiveReads(stores.live, stores.live_budget)
        chain, unresolved = _owner_chain(stores, pod, namespace, reads)
        return _context(stores, namespace, chain, unresolved,
                        owner_absent=unresolved is not None and reads.absent,
                        owner_read_error=None if reads.absent else reads.error)

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        """The namespace's labels from the cache; None when it does not hold the namespace."""
        return _namespace_labels(self._stores, namespace)

    def facts_for(self, obj: Obj, namespace: str) -> NamespaceFacts:
        """What the Ray-object stages need to know about `obj`'s namespace."""
        stores = self._stores
        if stores.local_queues is None:
            return NamespaceFacts(namespace=namespace)
        setup = stores.kueue() if stores.kueue is not None else None
        manages: bool | None = False
        if setup is not None and setup.manage_jobs_without_queue_name and obj.get("kind") in setup.ray_kinds:
            found = _namespace_labels(stores, namespace)
            manages = None if found is None else setup.manages_unqueued_in(found)
        return NamespaceFacts(
            default_queue_exists=stores.local_queues.get(namespace, c.DEFAULT_LOCAL_QUEUE) is not None,
            kueue_manages_unqueued=manages,
            namespace=namespace,
        )


class _LiveReads:
    """One pod's reads of what its owner caches lack, within one budget for all of them."""

    def __init__(self, reader: OwnerReader, budget: float) -> None:
        self.reader = reader
        self.budget = budget
        self.deadline = time.monotonic() + budget
        self.error: str | None = None
        self.absent = False  # the API server said an owner does not exist

    def __call__(self, kind: str, namespace: str, name: str, cached: Obj | None) -> Obj | None:
        if cached is not None:
            return cached
        try:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the {self.budget:g}s for this pod's reads ran out")
            found = self.reader(kind, namespace, name, left)
        except Exception as exc:  # named in the refusal; KubeRay retries the creation
            self.error = f"{type(exc).__name__}: {exc}"
            return cached
        self.absent = found is None
        return found


def _owner_chain(stores: _Stores, pod: Obj, namespace: str,
                 live: _LiveReads | None) -> tuple[list[Obj], str | None]:
    """The pod's Ray owners, nearest first, and the first one not found (as "Kind ns/name")."""
    chain: list[Obj] = []
    obj = pod
    for _ in range(_MAX_OWNER_DEPTH):
        ref = ray_owner(obj)
        if ref is None:
            break
        kind, name = ref
        store = stores.owners.get(kind)
        if store is None:
            break  # that kind is not served here, so nothing can be learned from it
        found = store.get(namespace, name)
        if live is not None:
            found = live(kind, namespace, name, found)
        if found is None:
            return chain, f"{kind} {namespace}/{name}"
        chain.append(found)
        obj = found
    return chain, None


def _context(stores: _Stores, namespace: str, chain: list[Obj], unresolved: str | None, *,
             live: Callable[[Obj, str], PodContext] | None = None, owner_absent: bool = False,
             owner_read_error: str | None = None) -> PodContext:
    default_queue = stores.local_queues is not None and stores.local_queues.get(
        namespace, c.DEFAULT_LOCAL_QUEUE) is not None
    setup = stores.kueue() if stores.kueue is not None else None
    return PodContext(
        owners=tuple(chain),
        unresolved_owner=unresolved,
        default_queue_exists=default_queue,
        priority_values=_PriorityValues(stores.priority_classes),
        kueue_job_kinds=setup.ray_kinds if setup is not None else frozenset(),
        # A pod only gets a warning from this, so a namespace the cache does not
        # hold yet is judged by the one label every namespace carries.
        kueue_manages_unqueued=setup is not None and setup.manages_unqueued_in(
            _namespace_labels(stores, namespace) or namespace_labels(namespace)),
        live=live,
        owner_absent=owner_absent,
        owner_read_error=owner_read_error,
    )


def _namespace_labels(stores: _Stores, namespace: str) -> Mapping[str, str] | None:
    found = stores.namespaces.get(None, namespace) if stores.namespaces is not None else None
    return labels(found) if found is not None else None


class _PriorityValues(Mapping[str, int]):
    """Lazy mapping over the PriorityClass cache: most reviews never ask."""

    def __init__(self, store: Store | None) -> None:
        self._store = store

    def __getitem__(self, name: str) -> int:
        obj = self._store.get(None, name) if self._store is not None else None
        value = obj.get("value") if obj else None
        if not isinstance(value, int):
            raise KeyError(name)
        return value

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0
