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
import time
from collections import Counter
from typing import Any

from raykueue.controller import workload as w
from raykueue.controller.removal import raycluster_ref
from raykueue.core import contract as c
from raykueue.kube import resources as r
from raykueue.kube.cache import WatchCache
from raykueue.kube.rest import ApiError, Rest
from testkit.reads import get_or_none
from testkit.watches import Watching

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


class Invariants(Watching):
    def __init__(self, admin: Rest, ns: str) -> None:
        self.admin, self.ns = admin, ns
        self.violations: list[str] = []
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._seen_opted_in: set[str] = set()  # uids of opted-in Ray objects
        pods, workloads = WatchCache(admin, r.PODS, namespace=ns), WatchCache(admin, WORKLOADS, namespace=ns)
        pods.add_handler(self._pod)
        workloads.add_handler(self._workload)
        ray = [WatchCache(admin, res, namespace=ns) for res in RAY.values()]
        for kind, cache in zip(RAY, ray, strict=True):
            cache.add_handler(lambda t, o, kind=kind: self._ray(kind, t, o))
        # Ray objects first: the Workload handler asks whether their owner is opted in.
        self.caches = [*ray, workloads, pods]

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
            pod = get_or_none(self.admin, r.PODS.path(self.ns, owner[0]), uid=owner[1])
            if pod is None:
                return
            if (pod["metadata"].get("labels") or {}).get(c.GANG_LABEL):
                return  # an extra moved into its gang's base (tests/e2e/test_gang.py checks cover)
            if not pod["metadata"].get("deletionTimestamp"):
                self._fail(f"Workload {meta['name']} was deleted while its pod {owner[0]} lives")

    def assert_held(self) -> None:
        with self._lock:
            assert not self.violations, "invariants broken:\n" + "\n".join(self.violations)


# --- gang clusters (docs/GANG.md) ------------------------------------------------------------

CQS = r.crd(c.KUEUE_GROUP, "v1beta2", "clusterqueues", namespaced=False)
LQS = r.crd(c.KUEUE_GROUP, "v1beta2", "localqueues")
_UNITS = {"m": 0.001, "": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def quantity(value: object) -> float:
    """A Kubernetes quantity ("500m", "512Mi", "3") as a number (cores, bytes)."""
    text = str(value)
    for suffix in sorted(_UNITS, key=len, reverse=True):
        if suffix and text.endswith(suffix):
            return float(text[: -len(suffix)]) * _UNITS[suffix]
    return float(text)


def requests(pod: dict[str, Any]) -> Counter[str]:
    out: Counter[str] = Counter()
    for ctr in pod["spec"].get("containers") or []:
        for name, value in ((ctr.get("resources") or {}).get("requests") or {}).items():
            out[name] += quantity(value)
    return out


def _released(pod: dict[str, Any]) -> bool:
    """Ours, past the gate, and running or about to: it uses what it requests."""
    meta = pod["metadata"]
    gates = [g.get("name") for g in pod["spec"].get("schedulingGates") or []]
    return ((meta.get("labels") or {}).get(c.MANAGED_BY_LABEL) == c.MANAGED_BY_VALUE
            and c.GATE not in gates and not meta.get("deletionTimestamp")
            and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))


def _holds_quota(wl: dict[str, Any]) -> bool:
    """Kueue counts it against the ClusterQueue (evicted ones too, until finished or gone)."""
    return (w.is_quota_reserved(wl) and not w.is_finished(wl)
            and not wl["metadata"].get("deletionTimestamp"))


def _base_slots(base: dict[str, Any]) -> Counter[str]:
    """Pods per podSet Kueue charged the base for, less what it handed back."""
    slots: Counter[str] = Counter()
    for item in ((base.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
        slots[item["name"]] += item.get("count") or 0
    for item in (base.get("status") or {}).get("reclaimablePods") or []:
        slots[item["name"]] -= item.get("count") or 0
    return slots


def uncovered(pods: list[dict[str, Any]], workloads: list[dict[str, Any]],
              clusters: set[str] | None = None) -> dict[str, str]:
    """Released pods of ours that no Workload holding quota covers: a pod's own, or a
    slot of its gang's base (never more pods per podSet than the base's slots).
    Keyed by the pod, or by gang and podSet.

    `clusters`, when given: the uids of the RayClusters alive (not being deleted). A
    gang pod of any other cluster is not counted: the base is the cluster's, and the
    garbage collector deletes a deleted cluster's base and pods in no set order, as it
    does the Workload of Kueue's own RayCluster integration."""
    own = {w.pod_uid_of(x) for x in workloads if w.is_ours(x) and _holds_quota(x)
           and w.owner_pod(x) is not None}
    slots: dict[str, Counter[str]] = {}
    for x in workloads:
        gang = (x["metadata"].get("labels") or {}).get(c.GANG_LABEL)
        if gang and w.owner_pod(x) is None and _holds_quota(x):
            slots.setdefault(gang, Counter()).update(_base_slots(x))
    leaning: dict[tuple[str, str], list[str]] = {}
    out: dict[str, str] = {}
    for pod in pods:
        if not _released(pod) or pod["metadata"]["uid"] in own:
            continue
        labels = pod["metadata"]["labels"]
        gang = labels.get(c.GANG_LABEL)
        name = pod["metadata"]["name"]
        if not gang:
            out[name] = f"pod {name} runs without an admitted Workload"
            continue
        owner = raycluster_ref(pod)
        if clusters is not None and (owner is None or owner["uid"] not in clusters):
            continue
        group = "head" if labels.get(c.NODE_TYPE_LABEL) == c.ROLE_HEAD else labels.get(c.GROUP_LABEL, "")
        leaning.setdefault((gang, group), []).append(name)
    for (gang, group), names in sorted(leaning.items()):
        held = slots.get(gang, Counter())[group]
        if len(names) > held:
            out[f"{gang}/{group}"] = (
                f"gang {gang} podSet {group}: {len(names)} pods past the gate without a Workload "
                f"of their own ({', '.join(sorted(names))}), base slots {held}")
    return out


class InvariantBroken(AssertionError):
    """A watched invariant failed during the scenario (raised inside waits)."""


class GangInvariants(Watching):
    """Every change of a namespace's pods and Workloads and of its ClusterQueue, checked
    as it happens, for a whole gang scenario:

    - never a pod past the gate that no Workload holding quota covers (its own, or a
      slot of its gang's base: never more pods per podSet than the base's slots);
    - never the ClusterQueue over its nominal quota: neither what Kueue reserves nor
      what the released pods request;
    - never a gang's base preempted while an extra of the same cluster keeps running
      with its own Workload no longer admitted (Kueue takes extras, which carry the
      worker priority, first; one it leaves admitted is within quota by Kueue's own
      count, and raykueue removes a pod only on Kueue's eviction of that pod's own
      Workload, issue 28);
    - `held`: clusters none of whose pods may be released nor hold quota.

    A coverage failure seen in the watch caches (the pod and Workload watches are two
    streams, either may lag) is confirmed on fresh reads before it counts.
    """

    def __init__(self, api: Rest, ns: str) -> None:
        self.admin, self.ns = api, ns
        self.violations: list[str] = []
        self.held: set[str] = set()
        self.created: dict[str, float] = {}  # pod uid -> when the watch first saw it
        self.released: dict[str, float] = {}  # pod uid -> when it was first seen ungated
        self.cluster_of: dict[str, str] = {}
        self.preempted: dict[str, set[str]] = {}  # base uid -> extras' Workload uids then running
        self.evicted_bases: dict[str, str] = {}  # base uid -> the reason Kueue evicted it
        self.max_used: Counter[str] = Counter()  # the most the released pods ever requested
        self._lock = threading.RLock()
        self.pods = WatchCache(api, r.PODS, namespace=ns)
        self.workloads = WatchCache(api, WORKLOADS, namespace=ns)
        self.cqs = WatchCache(api, CQS)
        self.pods.add_handler(self._pod)
        self.workloads.add_handler(self._workload)
        self.cqs.add_handler(lambda _, cq: self._reserved(cq))
        self.caches = (self.cqs, self.workloads, self.pods)
        self.cq = ""
        self.nominal: Counter[str] = Counter()

    def __enter__(self) -> GangInvariants:
        queues = self.admin.get(LQS.path(self.ns))["items"]
        if len(queues) == 1:
            self.cq = queues[0]["spec"]["clusterQueue"]
            cq = self.admin.get(CQS.path(None, self.cq))
            for group in cq["spec"].get("resourceGroups") or []:
                for flavor in group.get("flavors") or []:
                    for res in flavor.get("resources") or []:
                        self.nominal[res["name"]] += quantity(res["nominalQuota"])
        return super().__enter__()

    def _fail(self, what: str) -> None:
        with self._lock:
            if what not in self.violations:
                self.violations.append(what)

    # -- the checks ---------------------------------------------------------------------

    def _pod(self, event: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        if (meta.get("labels") or {}).get(c.MANAGED_BY_LABEL) != c.MANAGED_BY_VALUE:
            return
        name = meta["labels"].get(c.CLUSTER_LABEL, "")
        now = time.monotonic()
        with self._lock:
            if event != "DELETED":
                self.created.setdefault(meta["uid"], now)
                self.cluster_of[meta["uid"]] = name
                if _released(pod):
                    self.released.setdefault(meta["uid"], now)
                    if name in self.held:
                        self._fail(f"pod {meta['name']} of held cluster {name} released")
        self._used()
        self._covered()

    def _workload(self, event: str, wl: dict[str, Any]) -> None:
        labels = wl["metadata"].get("labels") or {}
        name = labels.get(c.CLUSTER_LABEL, "")
        if event != "DELETED" and name in self.held and w.is_quota_reserved(wl):
            self._fail(f"Workload {wl['metadata']['name']} of held cluster {name} holds quota")
        is_base = bool(labels.get(c.GANG_LABEL)) and w.owner_pod(wl) is None
        if event != "DELETED" and is_base and w.is_evicted(wl):
            with self._lock:
                self.evicted_bases.setdefault(wl["metadata"]["uid"], str(
                    (w.condition(wl, w.EVICTED) or {}).get("reason")))
        if event != "DELETED" and is_base and w.is_true(wl, w.PREEMPTED):
            with self._lock:
                if wl["metadata"]["uid"] not in self.preempted:
                    self.preempted[wl["metadata"]["uid"]] = {
                        x["metadata"]["uid"] for x in self.workloads.list(self.ns)
                        if (x["metadata"].get("labels") or {}).get(c.CLUSTER_LABEL) == name
                        and w.owner_pod(x) is not None and w.is_admitted(x)
                        and not w.is_evicted(x) and not w.is_finished(x)}
        self._covered()

    def _used(self) -> None:
        used: Counter[str] = Counter()
        for pod in self.pods.list(self.ns):
            if _released(pod):
                used.update(requests(pod))
        with self._lock:
            for res, amount in used.items():
                self.max_used[res] = max(self.max_used[res], amount)
                if res in self.nominal and amount > self.nominal[res] + 1e-9:
                    self._fail(f"released pods request {amount:g} {res}, over the nominal "
                               f"{self.nominal[res]:g} of ClusterQueue {self.cq}")

    def _reserved(self, cq: dict[str, Any]) -> None:
        if cq["metadata"]["name"] != self.cq:
            return
        reserved: Counter[str] = Counter()
        for flavor in (cq.get("status") or {}).get("flavorsReservation") or []:
            for res in flavor.get("resources") or []:
                reserved[res["name"]] += quantity(res.get("total", "0"))
        for res, amount in reserved.items():
            if res in self.nominal and amount > self.nominal[res] + 1e-9:
                self._fail(f"ClusterQueue {self.cq} reserves {amount:g} {res}, over its "
                           f"nominal {self.nominal[res]:g}")

    def _covered(self) -> None:
        if not uncovered(self.pods.list(self.ns), self.workloads.list(self.ns)):
            return
        # The two watches may be at different points. A Workload covers a pod from
        # before its release (admission, then gate lift) to after it goes (delete,
        # then finish): read the Workloads on both sides of a read of the pods, and
        # count what is uncovered against both. The RayClusters are read last: a cluster
        # deleted by then takes its base and its pods with it.
        before = self.admin.get(WORKLOADS.path(self.ns))["items"]
        pods = self.admin.get(r.PODS.path(self.ns))["items"]
        workloads = self.admin.get(WORKLOADS.path(self.ns))["items"]
        clusters = {x["metadata"]["uid"] for x in self.admin.get(
            RAY[c.RAYCLUSTER_KIND].path(self.ns))["items"]
            if not x["metadata"].get("deletionTimestamp")}
        after = uncovered(pods, workloads, clusters)
        first = uncovered(pods, before, clusters)
        for key, what in after.items():
            if key in first:
                self._fail(what)

    # -- for the tests ------------------------------------------------------------------

    def release_window(self, name: str) -> float:
        """Seconds from the last pod seen created to the last seen released, of a cluster."""
        with self._lock:
            uids = [u for u, n in self.cluster_of.items() if n == name and u in self.released]
            return max(self.released[u] for u in uids) - max(self.created[u] for u in uids)

    def survivors(self) -> list[str]:
        """Extras that ran on without admission after their gang's base was preempted."""
        out: list[str] = []
        with self._lock:
            preempted = dict(self.preempted)
        current = {x["metadata"]["uid"]: x for x in self.workloads.list(self.ns)}
        for base_uid, extras in preempted.items():
            for uid in extras:
                wl = current.get(uid)
                if wl is None or w.is_finished(wl) or wl["metadata"].get("deletionTimestamp"):
                    continue
                if w.is_evicted(wl) or not w.is_admitted(wl):
                    pod = next((x for x in self.pods.list(self.ns)
                                if x["metadata"]["uid"] == w.pod_uid_of(wl)
                                and not x["metadata"].get("deletionTimestamp")), None)
                    if pod is not None and _released(pod):
                        out.append(f"extra Workload {wl['metadata']['name']} lost its admission "
                                   f"after its gang's base ({base_uid}) was preempted, and its "
                                   "pod ran on")
        return out

    def check(self) -> None:
        """Raise at once if anything broke so far (called inside every wait)."""
        with self._lock:
            if self.violations:
                raise InvariantBroken("gang invariants broken:\n" + "\n".join(self.violations))

    def assert_held(self) -> None:
        self.check()
        broken = self.survivors()
        assert not broken, "gang invariants broken:\n" + "\n".join(broken)
