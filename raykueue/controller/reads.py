"""Every fact `decide` needs about one pod key, read before it runs.

From the caches, through the state's read-your-writes overlay: the pod, the
Workloads that name it, its cluster's heads, the flavors and priority classes.
From the state: the pod's last state once it left the cache. From the API
server, and only when those do not settle it (`decide.needs_live_pod`): whether
a pod of that name still exists, which tells a deleted pod from one that merely
lost our label.
"""

from __future__ import annotations

from dataclasses import dataclass

from raykueue.controller import decide as d
from raykueue.controller import gang_decide as gd
from raykueue.controller import pods as p
from raykueue.controller import workload as w
from raykueue.controller.caches import Caches, foreign_heads
from raykueue.controller.config import ControllerConfig
from raykueue.controller.retry import Retry
from raykueue.controller.state import ORPHANS, Key, State
from raykueue.core import contract as c
from raykueue.core.objects import Obj, labels, metadata
from raykueue.core.pods import role_of
from raykueue.kube import resources as r
from raykueue.kube.rest import ApiError, Rest

_RAYCLUSTERS = r.crd(c.RAY_API_GROUP, "v1", "rayclusters")


@dataclass(frozen=True, slots=True)
class Facts:
    """What one pass decides on."""

    pod: Obj | None
    workloads: list[Obj]
    ctx: d.Context


@dataclass(frozen=True, slots=True)
class GangFacts:
    """What one gang cluster's pass decides on."""

    pods: list[Obj]
    own: dict[str, Obj]  # pod uid -> its own (extra) Workload
    base: Obj | None
    ctx: gd.GangContext


class Reader:
    def __init__(self, rest: Rest, caches: Caches, state: State, config: ControllerConfig,
                 version: str) -> None:
        self.rest = rest
        self.caches = caches
        self.state = state
        self.config = config
        self.version = version

    def read(self, key: Key) -> Facts:
        pod = self.pod(key)
        workloads = self.workloads_named_for(key, pod)
        departed = self.state.departed(key) if pod is None else None
        live_uid: str | None = None
        if pod is None and key[1] != ORPHANS and d.needs_live_pod(workloads, departed):
            live_uid = self._live_pod_uid(key)
        return Facts(pod, workloads, self._context(pod, departed, live_uid))

    def pod(self, key: Key) -> Obj | None:
        return self.state.read("pod", key, self.caches.pods.get(key[0], key[1]))

    def workload(self, ns: str, name: str) -> Obj | None:
        return self.state.read("workload", (ns, name), self.caches.workloads.get(ns, name))

    def workloads_named_for(self, key: Key, pod: Obj | None) -> list[Obj]:
        ns, pod_name = key
        names = self.state.workload_names(key)
        if pod is not None:
            names.add(w.workload_name(pod))
        live_uids: set[str] = set()
        if pod_name == ORPHANS:
            live_uids = {p.uid(x) for x in self.caches.pods.list(ns)}
        found: list[Obj] = []
        for name in sorted(names):
            wl = self.workload(ns, name)
            if wl is None:
                continue
            owner = w.owner_pod(wl)
            if owner is not None:
                if owner[0] == pod_name:
                    found.append(wl)
            elif not w.is_ours(wl) or labels(wl).get(c.GANG_LABEL):
                # Not ours, or a gang's base (its cluster's pass handles it).
                continue
            elif pod is not None:
                # Its owner reference was removed by hand: our label still says whose it is.
                if w.pod_uid_of(wl) == p.uid(pod):
                    found.append(wl)
            elif pod_name == ORPHANS and w.pod_uid_of(wl) not in live_uids:
                found.append(wl)
        return found

    def gang(self, ns: str, cluster: str) -> GangFacts:
        """A gang cluster's pods, their own Workloads, its base and the context."""
        pods = [x for x in (self.pod((ns, name)) for name in self.state.members(ns, cluster))
                if x is not None and gd.is_gang_pod(x)]
        own: dict[str, Obj] = {}
        for pod in pods:
            wl = self.workload(ns, w.workload_name(pod))
            if (wl is not None and w.is_ours(wl) and w.pod_uid_of(wl) == p.uid(pod)
                    and not w.is_deleting(wl) and not w.is_finished(wl)):
                own[p.uid(pod)] = wl
        base: Obj | None = None
        ref = next((r for r in map(gd.raycluster_ref, pods) if r is not None), None)
        if ref is not None:
            base = self.workload(ns, gd.base_name(cluster, str(ref["uid"])))
        ctx = self._context(None, None, None)
        live_head = any(role_of(x) == c.ROLE_HEAD and not p.is_deleting(x) for x in pods)
        gone = ref is not None and base is not None and not live_head and self._cluster_gone(ns, ref)
        return GangFacts(pods, own, base, gd.GangContext(
            version=self.version, pods_ready=self.config.pods_ready, flavors=ctx.flavors,
            priority_values=ctx.priority_values, cluster_gone=gone))

    def _cluster_gone(self, ns: str, ref: Obj) -> bool:
        """Whether the gang's RayCluster is deleted or being deleted (a live GET, head gone only)."""
        try:
            found = self.rest.get(_RAYCLUSTERS.path(ns, str(ref.get("name"))))
        except ApiError as exc:
            if exc.is_not_found:
                return True
            raise Retry(f"reading RayCluster {ns}/{ref.get('name')}: {exc}") from exc
        meta = found.get("metadata") or {}
        return meta.get("uid") != ref.get("uid") or bool(meta.get("deletionTimestamp"))

    def _live_pod_uid(self, key: Key) -> str | None:
        try:
            live = self.rest.get(r.PODS.path(key[0], key[1]))
        except ApiError as exc:
            if exc.is_not_found:
                return None
            raise Retry(f"checking whether the pod still exists: {exc}") from exc
        return p.uid(live) if isinstance(live, dict) else None

    def _head_admitted(self, pod: Obj) -> bool:
        ns = p.key(pod)[0]
        cluster = p.cluster(pod)
        if not cluster:
            return False
        heads: list[tuple[Obj, Obj | None]] = []
        ours = self.state.heads(ns, cluster)
        for name in ours:
            other = self.pod((ns, name))
            if other is None or role_of(other) != c.ROLE_HEAD:
                continue
            mine = [x for x in self.workloads_named_for((ns, name), other)
                    if w.pod_uid_of(x) == p.uid(other) and w.is_ours(x)]
            heads.append((other, mine[0] if mine else None))
        # Heads raykueue never labelled (created before the opt-in or the install):
        # no Workload of ours, so they count once past every gate (decide.head_admitted).
        heads += [(other, None) for other in foreign_heads(self.caches.heads.list(ns))
                  if p.cluster(other) == cluster and p.name(other) not in ours]
        return d.head_admitted(heads)

    def context_for(self, pod: Obj) -> d.Context:
        """The decision context of a pod alone (stuck-gates reports ask why it has no Workload)."""
        return self._context(pod, None, None)

    def _context(self, pod: Obj | None, departed: Obj | None, live_uid: str | None) -> d.Context:
        flavors = {str(metadata(f).get("name")): f for f in self.caches.flavors.list()}
        values: dict[str, int] = {}
        for pc in self.caches.priority_classes.list():
            value = pc.get("value")
            if isinstance(value, int):
                values[str(metadata(pc).get("name"))] = value
        head_ok = False
        if (pod is not None and self.config.head_first and role_of(pod) == c.ROLE_WORKER
                and p.is_gated(pod)):
            head_ok = self._head_admitted(pod)
        return d.Context(version=self.version, head_first=self.config.head_first,
                         pods_ready=self.config.pods_ready, head_admitted=head_ok,
                         flavors=flavors, priority_values=values, departed=departed,
                         live_pod_uid=live_uid)
