"""What must hold while raykueue is down, comes back, or is uninstalled, watched for a whole scenario.

`QuotaInvariants(admin, namespaces, quota_namespaces, cluster_queues)` watches each
namespace's pods, Workloads, Ray objects and Events, and the ClusterQueues (watch
caches: every change, not a sample), and records each moment one of these fails:

1. a pod of an opted-in RayCluster is ungated without an admitted raykueue Workload
   for it, or keeps running after its raykueue Workload is gone;
2. a pod of a RayCluster that never opted in carries raykueue's gate or label;
3. an Event about a Ray object that never opted in names raykueue (it waited for it);
4. in a namespace under quota, a running Ray pod is covered by no admitted Workload:
   raykueue's for the pod, or Kueue's for its RayCluster, RayJob or RayService;
5. a ClusterQueue's usage or reservation exceeds its nominal quota.

Everything is judged on what users see (labels, gates, Workloads, Events, quota),
never on raykueue's internals. A check that the caches cannot settle (two watches
deliver in their own order) is confirmed with a fresh read before it is recorded.
`raise_if_broken()` fails a waiting test at once (pass it as `wait_for`'s check).
"""

from __future__ import annotations

import copy
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal
from typing import Any, TypeVar

from kubernetes.client import ApiClient
from kubernetes.utils import parse_quantity

from raykueue.controller import workload as w
from raykueue.core import contract as c
from raykueue.kube import resources as r
from raykueue.kube.cache import WatchCache
from raykueue.kube.rest import Rest
from testkit.pods import gated as gated_by_raykueue
from testkit.pods import running
from testkit.reads import get_or_none
from testkit.waiting import wait_for
from testkit.watches import Watching

WORKLOADS = r.crd(c.KUEUE_GROUP, "v1beta2", "workloads")
CLUSTER_QUEUES = r.crd(c.KUEUE_GROUP, "v1beta2", "clusterqueues", namespaced=False)
EVENTS = r.Resource("", "v1", "events")
RAY = {kind: r.crd(c.RAY_API_GROUP, "v1", kind.lower() + "s")
       for kind in (c.RAYCLUSTER_KIND, c.RAYJOB_KIND, c.RAYSERVICE_KIND)}
T = TypeVar("T")


class InvariantBroken(AssertionError):
    """Raised by `raise_if_broken` (and so by `wait`) once any invariant failed."""


def opted_in(obj: dict[str, Any] | None) -> bool:
    return bool(obj) and ((obj or {}).get("metadata", {}).get("annotations") or {}).get(
        c.STANDALONE_ANNOTATION) == "true"


def owner(obj: dict[str, Any], kinds: Iterable[str]) -> dict[str, Any] | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") in kinds:
            return ref
    return None


class QuotaInvariants(Watching):
    def __init__(self, admin: Rest, namespaces: Sequence[str], *, quota_namespaces: Sequence[str] = (),
                 cluster_queues: Sequence[str] = ()) -> None:
        # A client of its own, with a pool for its many watches and the reads they prompt.
        config = copy.copy(admin.api_client.configuration)
        config.connection_pool_maxsize = 64
        self._client = ApiClient(config)
        admin = Rest(self._client)
        self.admin = admin
        self.namespaces = list(namespaces)
        self.quota_namespaces = set(quota_namespaces)
        self.cluster_queue_names = set(cluster_queues)
        self.violations: list[str] = []
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.ever_opted_in: set[str] = set()  # uids of Ray objects seen opted in at any moment
        self.pods: dict[str, WatchCache] = {}
        self.workloads: dict[str, WatchCache] = {}
        self.ray: dict[tuple[str, str], WatchCache] = {}
        caches: list[WatchCache] = []
        for ns in self.namespaces:
            self.pods[ns] = WatchCache(admin, r.PODS, namespace=ns)
            self.pods[ns].add_handler(lambda t, o: self._pod(t, o))
            self.workloads[ns] = WatchCache(admin, WORKLOADS, namespace=ns)
            self.workloads[ns].add_handler(lambda t, o: self._workload(t, o))
            for kind, res in RAY.items():
                cache = WatchCache(admin, res, namespace=ns)
                cache.add_handler(lambda t, o: self._ray(o))
                self.ray[(ns, kind)] = cache
            events = WatchCache(admin, EVENTS, namespace=ns)
            events.add_handler(lambda t, o: self._event(t, o))
            # Ray objects first: the other handlers look them up.
            caches += [*(self.ray[(ns, k)] for k in RAY), self.workloads[ns], self.pods[ns], events]
        self.cluster_queues = WatchCache(admin, CLUSTER_QUEUES)
        self.cluster_queues.add_handler(lambda t, o: self._cluster_queue(o))
        self.caches = [*caches, self.cluster_queues]

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self._client.close()

    # --- for the test -------------------------------------------------------------------

    def raise_if_broken(self) -> None:
        with self._lock:
            if self.violations:
                raise InvariantBroken("invariants broken:\n" + "\n".join(self.violations))

    def wait(self, fn: Callable[[], T], timeout: float, message: str | Callable[[], str]) -> T:
        """`wait_for`, failing at once when an invariant breaks meanwhile."""
        def check() -> T:
            self.raise_if_broken()
            return fn()
        return wait_for(check, timeout=timeout, message=message, fatal=(InvariantBroken,))

    def sweep(self) -> None:
        """Check 4 for every running pod now, from fresh reads (the watches only see changes)."""
        for ns in self.quota_namespaces:
            for pod in self.admin.get(r.PODS.path(ns))["items"]:
                if running(pod):
                    self._covered(pod, fresh=True)
        self.raise_if_broken()

    # --- handlers (one thread per watch) ---------------------------------------------------

    def _fail(self, what: str) -> None:
        with self._lock:
            self.violations.append(what)

    def _ray(self, obj: dict[str, Any]) -> None:
        if opted_in(obj):
            self.ever_opted_in.add(obj["metadata"]["uid"])

    def _ray_object(self, ns: str, kind: str, name: str, *, fresh: bool = False) -> dict[str, Any] | None:
        if not fresh:
            cache = self.ray.get((ns, kind))
            found = cache.get(ns, name) if cache is not None else None
            if found is not None:
                return found
        return get_or_none(self.admin, RAY[kind].path(ns, name))

    def _cluster_of(self, pod: dict[str, Any], *, fresh: bool = False) -> dict[str, Any] | None:
        ref = owner(pod, (c.RAYCLUSTER_KIND,))
        if ref is None:
            return None
        cluster = self._ray_object(pod["metadata"]["namespace"], c.RAYCLUSTER_KIND, ref["name"], fresh=fresh)
        return cluster if cluster is not None and cluster["metadata"]["uid"] == ref["uid"] else None

    def _pod(self, event: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        self.counts[f"pods {event.lower()}"] += 1
        if event == "DELETED" or meta.get("deletionTimestamp"):
            return
        if (meta.get("labels") or {}).get(c.NODE_TYPE_LABEL) not in c.MANAGED_ROLES:
            return
        cluster = self._cluster_of(pod)
        labels = meta.get("labels") or {}
        ours = gated_by_raykueue(pod) or labels.get(c.MANAGED_BY_LABEL) == c.MANAGED_BY_VALUE
        never = cluster is not None and cluster["metadata"]["uid"] not in self.ever_opted_in
        if cluster is not None and never and not opted_in(cluster):
            if ours:
                self._fail(f"pod {meta['name']} of {cluster['metadata']['name']}, which never opted in, "
                           f"was taken by raykueue: gates {pod['spec'].get('schedulingGates')}")
            self._covered(pod)
            return
        if not gated_by_raykueue(pod) and (ours or opted_in(cluster)) and not self._admitted_ours(pod):
            # The caches may lag each other: judge again on fresh reads.
            fresh_cluster = self._cluster_of(pod, fresh=True)
            if (ours or opted_in(fresh_cluster)) and not self._admitted_ours(pod, fresh=True):
                self._fail(f"pod {meta['name']} of an opted-in cluster is ungated without an admitted "
                           f"raykueue Workload (phase {(pod.get('status') or {}).get('phase')})")
        if running(pod):
            self._covered(pod)

    def _admitted_ours(self, pod: dict[str, Any], *, fresh: bool = False) -> bool:
        ns, uid = pod["metadata"]["namespace"], pod["metadata"]["uid"]
        items = (self.admin.get(WORKLOADS.path(ns))["items"] if fresh else self.workloads[ns].list())
        return any(w.is_ours(x) and w.pod_uid_of(x) == uid and w.is_admitted(x) for x in items)

    def _covered(self, pod: dict[str, Any], *, fresh: bool = False) -> None:
        """Check 4: a running pod in a namespace under quota stands on an admitted Workload."""
        ns = pod["metadata"]["namespace"]
        if ns not in self.quota_namespaces or not running(pod):
            return
        if (pod["metadata"].get("labels") or {}).get(c.NODE_TYPE_LABEL) not in c.MANAGED_ROLES:
            return
        if self._admitted_ours(pod, fresh=fresh) or self._kueues_admitted(pod, fresh=fresh):
            return
        if not fresh:
            latest = self._fresh_pod(pod)
            if latest is None or not running(latest):
                return
            if self._admitted_ours(latest, fresh=True) or self._kueues_admitted(latest, fresh=True):
                return
        self._fail(f"pod {pod['metadata']['name']} runs in {ns} under no admitted Workload")

    def _fresh_pod(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        meta = pod["metadata"]
        return get_or_none(self.admin, r.PODS.path(meta["namespace"], meta["name"]), uid=meta["uid"])

    def _kueues_admitted(self, pod: dict[str, Any], *, fresh: bool = False) -> bool:
        """Kueue admitted the whole cluster: a Workload owned by its RayCluster or that one's owner."""
        ns = pod["metadata"]["namespace"]
        cluster = self._cluster_of(pod, fresh=fresh)
        if cluster is None:
            return False
        uids = {cluster["metadata"]["uid"]}
        top = owner(cluster, (c.RAYJOB_KIND, c.RAYSERVICE_KIND))
        if top is not None:
            uids.add(top["uid"])
        items = self.admin.get(WORKLOADS.path(ns))["items"] if fresh else self.workloads[ns].list()
        return any(not w.is_ours(x) and w.is_admitted(x) and not w.is_finished(x)
                   and {ref.get("uid") for ref in x["metadata"].get("ownerReferences") or []} & uids
                   for x in items)

    def _workload(self, event: str, wl: dict[str, Any]) -> None:
        self.counts[f"workloads {event.lower()}"] += 1
        if not w.is_ours(wl) or not (event == "DELETED" or w.is_finished(wl)):
            return
        pod_ref = w.owner_pod(wl)
        if pod_ref is None:
            return
        pod = get_or_none(self.admin, r.PODS.path(wl["metadata"]["namespace"], pod_ref[0]), uid=pod_ref[1])
        if pod is not None and running(pod) and not gated_by_raykueue(pod):
            self._fail(f"raykueue Workload {wl['metadata']['name']} went ({event}) while its pod "
                       f"{pod_ref[0]} runs")

    def _event(self, event: str, ev: dict[str, Any]) -> None:
        if event == "DELETED" or "raykueue" not in (ev.get("message") or ""):
            return
        ref = ev.get("involvedObject") or {}
        if ref.get("kind") not in RAY or ref.get("uid") in self.ever_opted_in:
            return
        obj = self._ray_object(ev["metadata"]["namespace"], ref["kind"], ref.get("name", ""))
        if obj is not None and (opted_in(obj) or obj["metadata"]["uid"] != ref.get("uid")):
            return
        self._fail(f"{ref['kind']} {ref.get('name')}, which never opted in, waited for raykueue: "
                   f"{ev.get('reason')}: {ev.get('message')}")

    def _cluster_queue(self, cq: dict[str, Any]) -> None:
        name = cq["metadata"]["name"]
        if name not in self.cluster_queue_names:
            return
        nominal: dict[tuple[str, str], Decimal] = {}
        for group in cq["spec"].get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                for res in flavor.get("resources") or []:
                    nominal[(flavor["name"], res["name"])] = parse_quantity(res["nominalQuota"])
        status = cq.get("status") or {}
        for field in ("flavorsUsage", "flavorsReservation"):
            for flavor in status.get(field) or []:
                for res in flavor.get("resources") or []:
                    total = parse_quantity(res.get("total") or "0")
                    limit = nominal.get((flavor["name"], res["name"]))
                    if limit is not None and total > limit:
                        self._fail(f"ClusterQueue {name} {field} {res['name']} is {total}, over its nominal "
                                   f"{limit}")
