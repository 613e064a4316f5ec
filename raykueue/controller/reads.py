"""Every fact `decide` needs about one pod key, read before it runs.

`Reader` is the `facts.Source` over the controller's caches, read through the
state's read-your-writes overlay: the Workloads that name a pod, its cluster's
heads, the flavors and priority classes; `facts.gather` does the rest, as it
does for `raykueue explain`. For a pod gone from the cache: its last state,
from the state, and from the API server, only when those do not settle it
(`decide.needs_live_pod`), whether a pod of that name still exists, which
tells a deleted pod from one that merely lost our label.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from raykueue.controller import decide as d
from raykueue.controller import pods as p
from raykueue.controller import removal
from raykueue.controller import workload as w
from raykueue.controller.caches import (
    RAYCLUSTERS,
    Caches,
    foreign_heads,
    slim_workload,
    workload_resource,
)
from raykueue.controller.config import ControllerConfig
from raykueue.controller.current import current_workload, names_pod
from raykueue.controller.facts import Facts, gather
from raykueue.controller.gang import base as gb
from raykueue.controller.gang.decide import GangContext
from raykueue.controller.keys import GangKey, OrphansKey, PodKey, Ref
from raykueue.controller.live import must_get
from raykueue.controller.retry import Retry
from raykueue.controller.state import State
from raykueue.core import contract as c
from raykueue.core.objects import Obj, labels, metadata
from raykueue.core.podrole import role_of
from raykueue.core.rayobjects import group_minimums, workers_to_delete
from raykueue.kube import resources as r
from raykueue.kube.rest import ApiError, Rest


@dataclass(frozen=True, slots=True)
class GangFacts:
    """What one gang cluster's pass decides on."""

    pods: list[Obj]
    own: dict[str, Obj]  # pod uid -> its own (extra) Workload
    base: Obj | None
    ctx: GangContext


class Reader:
    def __init__(self, rest: Rest, caches: Caches, state: State, config: ControllerConfig,
                 version: str, clock: Callable[[], float] = time.time) -> None:
        self.rest = rest
        self.clock = clock
        self.caches = caches
        self.state = state
        self.config = config
        self.version = version
        self._settings = d.Context(version=version, head_first=config.head_first,
                                   pods_ready=config.pods_ready,
                                   outside_quota_grace=config.outside_quota_grace_seconds,
                                   collector_grace=config.collector_grace_seconds)

    def read(self, key: PodKey | OrphansKey) -> Facts:
        if isinstance(key, OrphansKey):
            return Facts(None, self.orphans(key.namespace), self._settings)
        pod = self.pod(key.ref)
        if pod is not None:
            return self.facts(pod)
        workloads = self.workloads_named_for(key, None)
        departed = self.state.departed(key.ref)
        live_uid: str | None = None
        if d.needs_live_pod(workloads, departed):
            live_uid = self._live_pod_uid(key.ref)
        return Facts(None, workloads, replace(self._settings, departed=departed,
                                              live_pod_uid=live_uid, now=self.clock(),
                                              departed_at=self.state.departed_at(key.ref)))

    def facts(self, pod: Obj) -> Facts:
        """The facts about a pod in the cache, for the loop's pass.

        A running pod of ours with no Workload (adopted) gets one built from the
        pod as the API server has it now: the cache keeps no running pod's spec.
        """
        now = self.clock()
        settings = replace(self._settings, now=now)
        facts = gather(self, pod, settings)
        if d.needs_live_pod_spec(facts.pod, facts.workloads):
            try:
                live = self.rest.get(r.PODS.path(*p.key(pod)))
            except ApiError as exc:
                raise Retry(f"reading the running pod to make its Workload: {exc}") from exc
            if p.uid(live) != p.uid(pod):
                raise Retry("the pod in the cache is not the one the API server has; waiting for the watch")
            return gather(self, live, settings)
        grace = self.config.outside_quota_grace_seconds
        current = current_workload(pod, facts.workloads)
        if current is not None and removal.is_candidate(pod, current, now, grace):
            # Outside quota: the others of its cluster decide whether it goes now.
            ahead = removal.ahead_of(pod, current, self._cluster_peers(pod), now, grace)
            facts = replace(facts, ctx=replace(facts.ctx, outside_quota_ahead=ahead))
        return facts

    def _cluster_peers(self, pod: Obj) -> list[tuple[Obj, Obj | None]]:
        ns, cluster = p.key(pod)[0], p.cluster(pod)
        if not cluster:
            return []
        return [(x, self.workload(ns, w.workload_name(x))) for x in self.caches.pods.list(ns)
                if p.cluster(x) == cluster]

    def sweep(self) -> Callable[[Obj], Facts]:
        """The facts about many pods at one moment (the stuck-gate report):
        each cluster's heads are judged once."""
        heads_seen: dict[tuple[str, str], bool] = {}
        return lambda pod: gather(self, pod, self._settings, heads_seen)

    # --- facts.Source ---------------------------------------------------------------

    def workloads_of(self, pod: Obj) -> list[Obj]:
        return self.workloads_named_for(PodKey(*p.key(pod)), pod)

    def heads(self, namespace: str, cluster: str) -> list[Obj]:
        ours = self.state.heads(namespace, cluster)
        found = [x for x in (self.pod((namespace, name)) for name in ours) if x is not None]
        # Heads raykueue never labelled (created before the opt-in or the install):
        # no Workload of ours, so they count once past every gate (decide.head_admitted).
        return found + [x for x in foreign_heads(self.caches.heads.list(namespace))
                        if p.cluster(x) == cluster and p.name(x) not in ours]

    def flavor(self, name: str) -> Obj | None:
        return self.caches.flavors.get(None, name)

    def priority_value(self, class_name: str) -> int | None:
        found = self.caches.priority_classes.get(None, class_name)
        value = found.get("value") if found is not None else None
        return value if isinstance(value, int) else None

    # --- the caches through the overlay -------------------------------------------------

    def pod(self, key: Ref) -> Obj | None:
        return self.state.read("pod", key, self.caches.pods.get(key[0], key[1]))

    def workload(self, ns: str, name: str) -> Obj | None:
        return self.state.read("workload", (ns, name), self.caches.workloads.get(ns, name))

    def workloads_named_for(self, key: PodKey, pod: Obj | None) -> list[Obj]:
        names = self.state.workload_names(key)
        if pod is not None:
            names.add(w.workload_name(pod))
        found: list[Obj] = []
        for name in sorted(names):
            wl = self.workload(key.namespace, name)
            if wl is None:
                continue
            owner = w.owner_pod(wl)
            if pod is not None:
                keep = names_pod(wl, key.name, p.uid(pod))
            else:
                keep = owner is not None and owner[0] == key.name
            if keep:
                found.append(wl)
        return found

    def orphans(self, ns: str) -> list[Obj]:
        """Ours, no owner reference, for no pod in the cache (a gang's base is its cluster's)."""
        live_uids = {p.uid(x) for x in self.caches.pods.list(ns)}
        found = (self.workload(ns, name)
                 for name in sorted(self.state.workload_names(OrphansKey(ns))))
        return [wl for wl in found if wl is not None and w.owner_pod(wl) is None
                and w.is_ours(wl) and not labels(wl).get(c.GANG_LABEL)
                and w.pod_uid_of(wl) not in live_uids]

    def gang(self, key: GangKey) -> GangFacts:
        """A gang cluster's pods, their own Workloads, its base and the context."""
        ns, cluster = key.namespace, key.cluster
        pods = [x for x in (self.pod((ns, name)) for name in self.state.members(ns, cluster))
                if x is not None and gb.is_gang_pod(x)]
        own: dict[str, Obj] = {}
        for pod in pods:
            wl = self.workload(ns, w.workload_name(pod))
            # A finished one too: its pod is on its way out, no base pod (gang.decide).
            if (wl is not None and w.is_ours(wl) and w.pod_uid_of(wl) == p.uid(pod)
                    and not p.is_deleting(wl)):
                own[p.uid(pod)] = wl
        base: Obj | None = None
        ref = next((r for r in map(gb.raycluster_ref, pods) if r is not None), None)
        if ref is not None:
            name = gb.base_name(cluster, str(ref["uid"]))
            base = self.workload(ns, name)
            if base is None and any(not p.is_gated(x) and not p.is_deleting(x) for x in pods):
                # Pods stand past the gate: a base missing from the cache is no evidence
                # that there is none; the API server says.
                base = self._live_workload(ns, name)
        elif not pods:
            # Its last pod went: the base is found by its label, so that it does not
            # outlive its pods holding quota (gang.decide deletes it once none stands).
            found = [x for x in self.caches.workloads.list(ns) if gb.is_base(x)
                     and w.is_ours(x) and labels(x).get(c.GANG_LABEL) == cluster]
            if len(found) == 1:
                base = self.workload(ns, p.name(found[0]))
        live_head = any(role_of(x) == c.ROLE_HEAD and not p.is_deleting(x) for x in pods)
        # Pods past the gate with no base: the garbage collector may have taken the base
        # of a RayCluster being deleted before its pods show it.
        orphaned = base is None and any(not p.is_gated(x) and not p.is_deleting(x) for x in pods)
        gone = (ref is not None and ((base is not None and not live_head) or orphaned)
                and self._cluster_gone(ns, ref))
        raycluster = self.caches.rayclusters.get(ns, str(ref.get("name"))) if ref else None
        if raycluster is not None and metadata(raycluster).get("uid") != ref.get("uid"):
            raycluster = None
        return GangFacts(pods, own, base, GangContext(
            version=self.version, pods_ready=self.config.pods_ready, flavors=self._flavors(),
            priority_values=self._priority_values(), cluster_gone=gone,
            min_replicas=group_minimums(raycluster) if raycluster is not None else None,
            victims=workers_to_delete(raycluster) if raycluster is not None else frozenset(),
            released=self.state.gang_released(ns, cluster)))

    def _cluster_gone(self, ns: str, ref: Obj) -> bool:
        """Whether the gang's RayCluster is deleted or being deleted (a live GET, head gone only)."""
        found = must_get(self.rest, RAYCLUSTERS.path(ns, str(ref.get("name"))),
                         f"RayCluster {ns}/{ref.get('name')}")
        if not isinstance(found, dict):
            return True
        meta = found.get("metadata") or {}
        return meta.get("uid") != ref.get("uid") or bool(meta.get("deletionTimestamp"))

    def _live_workload(self, ns: str, name: str) -> Obj | None:
        found = must_get(self.rest, workload_resource(self.version).path(ns, name), f"Workload {ns}/{name}")
        return slim_workload(found) if isinstance(found, dict) else None

    def _live_pod_uid(self, key: Ref) -> str | None:
        live = must_get(self.rest, r.PODS.path(key[0], key[1]), f"pod {key[0]}/{key[1]}")
        return p.uid(live) if isinstance(live, dict) else None

    def _flavors(self) -> dict[str, Obj]:
        return {str(metadata(f).get("name")): f for f in self.caches.flavors.list()}

    def _priority_values(self) -> dict[str, int]:
        values: dict[str, int] = {}
        for pc in self.caches.priority_classes.list():
            value = pc.get("value")
            if isinstance(value, int):
                values[str(metadata(pc).get("name"))] = value
        return values
