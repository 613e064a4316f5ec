"""The controller loop: caches in, `decide`, writes out.

Everything it knows lives in the API server: the caches are rebuilt by a
list on start, Workload names are deterministic, and every rule in `decide`
tests current state. So a restarted (or newly elected) controller adopts what
its predecessor left, finishes Workloads whose pods vanished meanwhile, and
never creates a second Workload for a pod.

API writes per pod, for a pod that is admitted, runs and is scaled down:

1. POST the Workload: Kueue needs an object to queue; none exists before.
2. PATCH the pod: removes the gate and adds the flavor's nodeSelector and
   tolerations in one JSON patch (the API server only lets a gated pod's
   placement grow, so they cannot come later; doing both in one write also
   means the scheduler never sees a half-placed pod).
3. Apply Workload status PodsReady=True once the pod is Ready: Kueue's
   WaitForPodsReady evicts an admitted Workload that never gets it. The
   PodsReady=False of Kueue's integrations before readiness is not written:
   Kueue treats an absent condition the same way (admittedNotReadyWorkload).
4. DELETE the Workload once the pod is being deleted, so the quota is free
   at once (Kueue drops it on the delete event) instead of when the garbage
   collector gets to it after the pod's grace period. Marking it Finished
   instead would be one write more: ours, then the collector's delete. A pod
   that ends but stays (Succeeded, Failed) gets Finished=True, which keeps
   its outcome readable until the pod goes.

So 4 writes, and nothing left for the garbage collector. An eviction takes
4 in place of step 4 (pod condition, Event, pod delete, Finished=Evicted);
the collector then deletes the Workload. A Warning Event is written only
when something needs a human: a conflict, a missing WorkloadPriorityClass,
an eviction.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from controller import decide as d
from controller import metrics as m
from controller import patches
from controller import pods as p
from controller import workload as w
from controller.config import ControllerConfig
from controller.stuck import StuckGates
from controller.workqueue import WorkQueue
from kube import resources as r
from kube.cache import DELETED, WatchCache
from kube.events import WARNING
from kube.rest import ApiError, Rest
from webhooks import contract as c
from webhooks.objects import Obj, labels, metadata

log = logging.getLogger("raykueue.controller")

Key = tuple[str, str]  # (namespace, pod name)
# The pod name under which Workloads of ours that lost their owner reference
# (a pod deleted with propagationPolicy=Orphan) are reconciled: nothing else
# would ever finish them, and they would hold quota for good.
ORPHANS = ""


class Recorder(Protocol):
    def record(self, obj: Mapping[str, Any], type: str, reason: str, message: str,
               action: str | None = None) -> None: ...


class Cache(Protocol):
    synced: bool

    def start(self) -> Any: ...
    def stop(self, timeout: float = 5.0) -> None: ...
    def wait_synced(self, timeout: float | None = None) -> bool: ...
    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None: ...
    def list(self, namespace: str | None = None) -> list[dict[str, Any]]: ...
    def add_handler(self, fn: Callable[[str, dict[str, Any]], None]) -> None: ...


CacheFactory = Callable[..., Cache]


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


def slim_workload(obj: dict[str, Any]) -> dict[str, Any]:
    """Cache transform: managedFields and pod templates are most of a Workload's
    bytes and nothing here reads them."""
    obj.get("metadata", {}).pop("managedFields", None)
    # Whether it asks for what its pod asks for is all we need of the templates.
    obj[w.FINGERPRINT_KEY] = w.pod_sets_fingerprint(obj)
    for pod_set in (obj.get("spec") or {}).get("podSets") or []:
        if isinstance(pod_set, dict):
            pod_set.pop("template", None)
    return obj


def slim_pod(obj: dict[str, Any]) -> dict[str, Any]:
    obj.get("metadata", {}).pop("managedFields", None)
    return obj


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: object) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _index(index: dict[Key, set[str]], key: Key, name: str, present: bool) -> None:
    if present:
        index.setdefault(key, set()).add(name)
        return
    names = index.get(key)
    if names is not None:
        names.discard(name)
        if not names:
            del index[key]


class _Retry(Exception):
    """A write failed in a way a later attempt (on fresher state) may fix."""


class Controller:
    def __init__(self, rest: Rest, config: ControllerConfig | None = None,
                 recorder: Recorder | None = None, *,
                 cache_factory: CacheFactory = WatchCache,
                 clock: Callable[[], float] = time.time) -> None:
        self.rest = rest
        self.config = config or ControllerConfig()
        self.recorder = recorder
        self._cache_factory = cache_factory
        self._clock = clock
        self.version = self.config.workload_version or w.V1BETA2
        self.queue: WorkQueue[Key] = WorkQueue(base_delay=self.config.retry_base_seconds,
                                               max_delay=self.config.retry_max_seconds)
        self._lock = threading.Lock()
        self._wl_by_owner: dict[Key, set[str]] = {}
        self._cluster_pods: dict[Key, set[str]] = {}  # (ns, cluster) -> pod names
        self._cluster_heads: dict[Key, set[str]] = {}  # (ns, cluster) -> head pod names
        self._admitted_seen: dict[str, float] = {}  # Workload uid -> when we saw Admitted
        self._departed: dict[Key, Obj] = {}  # last state of pods gone from the cache
        self._written: dict[tuple[str, str, str], tuple[str | None, Obj]] = {}
        self._reported: dict[str, set[tuple[str, str]]] = {}  # pod uid -> events sent
        self._conflicts: dict[str, tuple[str, str]] = {}  # "ns/pod" -> (kind, message)
        self._caches: list[Cache] = []
        self.pods: Cache | None = None
        self.workloads: Cache | None = None
        self.flavors: Cache | None = None
        self.priority_classes: Cache | None = None
        self._synced = threading.Event()

    # --- public -------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def conflicts(self) -> dict[str, str]:
        """Pods left alone because something else claims them: "ns/name" -> why."""
        with self._lock:
            return {k: f"{kind}: {msg}" for k, (kind, msg) in sorted(self._conflicts.items())}

    def run(self, stop: threading.Event) -> None:
        """Reconcile until `stop` is set (leadership lost or shutdown)."""
        version = self.config.workload_version
        while version is None and not stop.is_set():
            try:
                version = discover_version(self.rest)
                if version is None:
                    log.warning("kueue.x-k8s.io Workloads are not served; is Kueue installed? "
                                "retrying in 10s")
            except ApiError as exc:
                log.warning("discovering Kueue's API: %s; retrying in 10s", exc)
            if version is None:
                stop.wait(10)
        if version is None:
            return
        workers: list[threading.Thread] = []
        try:
            if not self.start(version, stop):
                return
            workers.append(StuckGates(
                self.pods.list, self.workloads.list, head_first=self.config.head_first,
                grace_seconds=self.config.stuck_grace_seconds, context=self._context,
                record=self._event_once, requeue=lambda pod: self.queue.add(p.key(pod)),
                clock=self._clock).start(stop, self.config.stuck_interval_seconds))
            for i in range(self.config.workers):
                thread = threading.Thread(target=self._work, args=(stop,),
                                          name=f"reconcile-{i}", daemon=True)
                thread.start()
                workers.append(thread)
            while not stop.wait(self.config.resync_seconds):
                self._enqueue_all()
        finally:
            self._synced.clear()
            self.queue.shutdown()
            for thread in workers:
                thread.join(timeout=10)
            self.stop_caches()
            self._uninstall_gauges()
            log.info("controller stopped")

    def start(self, version: str, stop: threading.Event) -> bool:
        """Start the caches and wait for them; False if `stop` came first.

        `run` calls this, then starts the workers; tests call it and then
        `process` keys themselves.
        """
        self.version = version
        log.info("controller starting: Workloads at %s, head_first=%s, %d workers",
                 w.api_version(version), self.config.head_first, self.config.workers)
        self._start_caches()
        if not self._wait_synced(stop):
            return False
        self._synced.set()
        self._install_gauges()
        self._enqueue_all()
        return True

    def stop_caches(self) -> None:
        for cache in self._caches:
            cache.stop()

    # --- caches and events -----------------------------------------------------------

    def _start_caches(self) -> None:
        ns = self.config.namespace
        make = self._cache_factory
        self.pods = make(self.rest, r.PODS, namespace=ns,
                         label_selector=f"{c.MANAGED_BY_LABEL}={c.MANAGED_BY_VALUE}",
                         transform=slim_pod)
        # All Workloads, not just ours: one Kueue made for our pod is a conflict.
        self.workloads = make(self.rest, workload_resource(self.version), namespace=ns,
                              transform=slim_workload)
        self.flavors = make(self.rest, kueue_resource(self.version, "resourceflavors",
                                                      namespaced=False))
        self.priority_classes = make(self.rest, kueue_resource(
            self.version, "workloadpriorityclasses", namespaced=False))
        self.pods.add_handler(self._on_pod)
        self.workloads.add_handler(self._on_workload)
        self.flavors.add_handler(self._on_placement_input)
        self.priority_classes.add_handler(self._on_placement_input)
        self._caches = [self.pods, self.workloads, self.flavors, self.priority_classes]
        for cache in self._caches:
            cache.start()

    def _wait_synced(self, stop: threading.Event) -> bool:
        deadline = time.monotonic() + self.config.cache_sync_timeout_seconds
        while not stop.is_set():
            if all(cache.wait_synced(0.2) for cache in self._caches):
                return True
            if time.monotonic() > deadline:
                log.warning("caches not synced after %.0fs; still waiting",
                            self.config.cache_sync_timeout_seconds)
                deadline = time.monotonic() + self.config.cache_sync_timeout_seconds
        return False

    def _on_pod(self, event: str, pod: Obj) -> None:
        key = p.key(pod)
        cluster = p.cluster(pod)
        with self._lock:
            self._drop_written("pod", key, pod)
            if cluster:
                _index(self._cluster_pods, (key[0], cluster), key[1], event != DELETED)
                _index(self._cluster_heads, (key[0], cluster), key[1],
                       event != DELETED and p.role(pod) == c.ROLE_HEAD)
            if event == DELETED:
                self._departed[key] = pod
            else:
                self._departed.pop(key, None)
        self.queue.add(key)
        if cluster and p.role(pod) == c.ROLE_HEAD:
            self._enqueue_waiting_workers(key[0], cluster)

    def _on_workload(self, event: str, wl: Obj) -> None:
        owner = w.owner_pod(wl)
        if owner is None and not w.is_ours(wl):
            return
        ns = str(metadata(wl).get("namespace") or "")
        name = str(metadata(wl).get("name") or "")
        key = (ns, owner[0] if owner is not None else ORPHANS)
        uid = str(metadata(wl).get("uid") or "")
        with self._lock:
            self._drop_written("workload", (ns, name), wl)
            _index(self._wl_by_owner, key, name, event != DELETED)
            if event == DELETED:
                self._admitted_seen.pop(uid, None)
            elif self.synced and w.is_admitted(wl) and uid not in self._admitted_seen:
                # Only transitions seen live: for Workloads in the initial list
                # the condition's own time is the better (if coarser) answer.
                self._admitted_seen[uid] = self._clock()
        self.queue.add(key)
        cluster = labels(wl).get(c.CLUSTER_LABEL)
        if cluster and labels(wl).get(c.NODE_TYPE_LABEL) == c.ROLE_HEAD:
            self._enqueue_waiting_workers(ns, cluster)

    def _on_placement_input(self, event: str, obj: Obj) -> None:
        # A new ResourceFlavor or WorkloadPriorityClass may unblock gated pods.
        if not self.synced or self.pods is None:
            return
        for pod in self.pods.list():
            if p.is_gated(pod):
                self.queue.add(p.key(pod))

    def _enqueue_waiting_workers(self, ns: str, cluster: str) -> None:
        with self._lock:
            members = list(self._cluster_pods.get((ns, cluster), ()))
            waiting = [name for name in members if not self._wl_by_owner.get((ns, name))]
        for name in waiting:
            self.queue.add((ns, name))

    def _enqueue_all(self) -> None:
        assert self.pods is not None and self.workloads is not None
        for pod in self.pods.list():
            self.queue.add(p.key(pod))
        for wl in self.workloads.list():
            if w.is_ours(wl):
                owner = w.owner_pod(wl)
                self.queue.add((str(metadata(wl).get("namespace") or ""),
                                owner[0] if owner is not None else ORPHANS))

    # --- reads through what we just wrote ---------------------------------------------

    def _drop_written(self, kind: str, key: Key, obj: Obj) -> None:
        entry = self._written.get((kind, *key))
        if entry is not None and entry[0] != metadata(obj).get("resourceVersion"):
            del self._written[(kind, *key)]

    def _remember(self, kind: str, key: Key, before: Obj | None, after: Obj) -> None:
        """Until the watch delivers our write, reads return its result: a
        reconcile triggered meanwhile must not repeat the write."""
        pre_rv = metadata(before).get("resourceVersion") if before is not None else None
        with self._lock:
            self._written[(kind, *key)] = (pre_rv, after)

    def _read(self, kind: str, cache: Cache, key: Key) -> Obj | None:
        obj = cache.get(key[0], key[1])
        with self._lock:
            entry = self._written.get((kind, *key))
            if entry is None:
                return obj
            pre_rv, after = entry
            current = metadata(obj).get("resourceVersion") if obj is not None else None
            if current == pre_rv:
                return after
            del self._written[(kind, *key)]
            return obj

    def _pod(self, key: Key) -> Obj | None:
        assert self.pods is not None
        return self._read("pod", self.pods, key)

    def _workload(self, ns: str, name: str) -> Obj | None:
        assert self.workloads is not None
        return self._read("workload", self.workloads, (ns, name))

    def _workloads_named_for(self, key: Key, pod: Obj | None) -> list[Obj]:
        ns, pod_name = key
        with self._lock:
            names = set(self._wl_by_owner.get(key, ()))
            names |= {k[2] for k in self._written if k[0] == "workload" and k[1] == ns}
        if pod is not None:
            names.add(w.workload_name(pod))
        live_uids: set[str] = set()
        if pod_name == ORPHANS and self.pods is not None:
            live_uids = {p.uid(x) for x in self.pods.list(ns)}
        found: list[Obj] = []
        for name in sorted(names):
            wl = self._workload(ns, name)
            if wl is None:
                continue
            owner = w.owner_pod(wl)
            if owner is not None:
                if owner[0] == pod_name:
                    found.append(wl)
            elif not w.is_ours(wl):
                continue
            elif pod is not None:
                # Its owner reference was removed by hand: our label still says whose it is.
                if w.pod_uid_of(wl) == p.uid(pod):
                    found.append(wl)
            elif pod_name == ORPHANS and w.pod_uid_of(wl) not in live_uids:
                found.append(wl)
        return found

    def _head_admitted(self, pod: Obj) -> bool:
        ns = p.key(pod)[0]
        cluster = p.cluster(pod)
        if not cluster:
            return False
        with self._lock:
            names = list(self._cluster_heads.get((ns, cluster), ()))
        heads: list[tuple[Obj, Obj | None]] = []
        for name in names:
            other = self._pod((ns, name))
            if other is None or p.role(other) != c.ROLE_HEAD:
                continue
            mine = [x for x in self._workloads_named_for((ns, name), other)
                    if w.pod_uid_of(x) == p.uid(other) and w.is_ours(x)]
            heads.append((other, mine[0] if mine else None))
        return d.head_admitted(heads)

    def _context(self, pod: Obj | None) -> d.Context:
        assert self.flavors is not None and self.priority_classes is not None
        flavors = {str(metadata(f).get("name")): f for f in self.flavors.list()}
        values: dict[str, int] = {}
        for pc in self.priority_classes.list():
            value = pc.get("value")
            if isinstance(value, int):
                values[str(metadata(pc).get("name"))] = value
        head_ok = False
        if (pod is not None and self.config.head_first and p.role(pod) == c.ROLE_WORKER
                and p.is_gated(pod)):
            head_ok = self._head_admitted(pod)
        return d.Context(version=self.version, head_first=self.config.head_first,
                         pods_ready=self.config.pods_ready, head_admitted=head_ok,
                         flavors=flavors, priority_values=values)

    # --- workers ------------------------------------------------------------------------

    def _work(self, stop: threading.Event) -> None:
        while not stop.is_set():
            key = self.queue.get(timeout=0.5)
            if key is not None:
                self.process(key)

    def process(self, key: Key) -> bool:
        """Reconcile a key taken from the queue; False if it was requeued."""
        try:
            self.reconcile(key)
        except _Retry as exc:
            delay = self.queue.retry(key)
            log.info("%s/%s: %s; retrying in %.2fs", key[0], key[1], exc, delay)
            return False
        except Exception:
            m.RECONCILE_ERRORS.inc()
            delay = self.queue.retry(key)
            log.exception("%s/%s: reconcile failed; retrying in %.2fs", key[0], key[1], delay)
            return False
        else:
            self.queue.forget(key)
            return True
        finally:
            self.queue.done(key)

    def reconcile(self, key: Key) -> list[d.Action]:
        """One pass for one pod key; returns the actions it applied."""
        pod = self._pod(key)
        with self._lock:
            departed = self._departed.get(key) if pod is None else None
        workloads = self._workloads_named_for(key, pod)
        actions = d.decide(pod, workloads, self._context(pod))
        actions = self._refine_departures(key, pod, departed, actions, workloads)
        self._track_conflicts(key, pod, actions)
        by_name = {str(metadata(x).get("name")): x for x in workloads}
        for action in actions:
            self._apply(action, key, pod, by_name)
        if pod is None:
            with self._lock:
                self._departed.pop(key, None)
                if departed is not None:
                    self._reported.pop(p.uid(departed), None)
                self._conflicts.pop(f"{key[0]}/{key[1]}", None)
        return actions

    def _refine_departures(self, key: Key, pod: Obj | None, departed: Obj | None,
                           actions: list[d.Action], workloads: list[Obj]) -> list[d.Action]:
        """Give the finish of a vanished pod's Workload its real reason.

        `decide` sees only "no pod". When the watch told us how the pod went
        (its last state), that says whether it succeeded, failed or was
        deleted. Without it (we were down) the pod is checked with a GET: a pod
        that merely lost our label also drops out of the cache, and finishing
        its Workload would release quota for a pod that still runs.
        """
        if pod is not None:
            return actions
        out: list[d.Action] = []
        by_name = {str(metadata(x).get("name")): x for x in workloads}
        for action in actions:
            if isinstance(action, d.FinishWorkload) and action.reason == d.FINISHED_OWNER_NOT_FOUND:
                wl = by_name.get(action.workload)
                uid = w.pod_uid_of(wl) if wl is not None else None
                # A pod that merely stopped matching our label selector also
                # "departs" from the cache, without a deletionTimestamp.
                if (departed is not None and uid == p.uid(departed)
                        and (p.is_deleting(departed) or p.is_terminal(departed))):
                    out += d.release(departed, wl) if wl is not None else []
                    continue
                if uid and key[1] != ORPHANS and self._pod_still_exists(key, uid):
                    log.warning("%s/%s: pod exists but is no longer labelled %s=%s; leaving "
                                "its Workload %s alone", key[0], key[1], c.MANAGED_BY_LABEL,
                                c.MANAGED_BY_VALUE, action.workload)
                    continue
            out.append(action)
        return out

    def _pod_still_exists(self, key: Key, uid: str) -> bool:
        try:
            live = self.rest.get(r.PODS.path(key[0], key[1]))
        except ApiError as exc:
            if exc.is_not_found:
                return False
            raise _Retry(f"checking whether the pod still exists: {exc}") from exc
        return isinstance(live, dict) and p.uid(live) == uid

    def _track_conflicts(self, key: Key, pod: Obj | None, actions: Iterable[d.Action]) -> None:
        conflict = next((a for a in actions if isinstance(a, d.ReportConflict)), None)
        name = f"{key[0]}/{key[1]}"
        with self._lock:
            if conflict is None:
                self._conflicts.pop(name, None)
                return
            previous = self._conflicts.get(name)
            self._conflicts[name] = (conflict.kind, conflict.message)
        if previous is None or previous[0] != conflict.kind:
            m.CONFLICTS.labels(kind=conflict.kind).inc()
            log.warning("%s: %s", name, conflict.message)

    # --- applying actions -------------------------------------------------------------

    def _apply(self, action: d.Action, key: Key, pod: Obj | None,
               workloads: dict[str, Obj]) -> None:
        if isinstance(action, d.CreateWorkload):
            self._create(action, key)
        elif isinstance(action, d.LiftGate):
            assert pod is not None
            self._lift(action, key, pod, workloads.get(action.workload))
        elif isinstance(action, d.SetPodsReady):
            self._set_conditions(key, workloads, action.workload, w.ConditionUpdate(
                w.PODS_READY, action.ready, action.reason, action.message))
        elif isinstance(action, d.FinishWorkload):
            if self._set_conditions(key, workloads, action.workload, w.ConditionUpdate(
                    w.FINISHED, True, action.reason, action.message)):
                m.WORKLOADS_FINISHED.labels(reason=action.reason).inc()
                log.info("%s/%s: Workload %s finished (%s)", key[0], key[1], action.workload,
                         action.reason)
        elif isinstance(action, d.DeleteWorkload):
            self._delete_workload(action, key, workloads)
        elif isinstance(action, d.EvictPod):
            assert pod is not None
            self._evict(action, key, pod, workloads.get(action.workload))
        elif isinstance(action, d.ReportConflict):
            assert pod is not None
            self._event_once(pod, WARNING, action.kind, action.message)
            wl = workloads.get(action.workload) if action.workload else None
            if wl is not None:
                self._event_once(pod, WARNING, action.kind, action.message, regarding=wl)
        elif isinstance(action, d.Warn):
            assert pod is not None
            log.warning("%s/%s: %s", key[0], key[1], action.message)
            self._event_once(pod, WARNING, action.reason, action.message)
        elif isinstance(action, d.Wait):
            log.debug("%s/%s: waiting: %s", key[0], key[1], action.reason)

    def _write(self, verb: str, resource: str, call: Callable[[], Any]) -> Any:
        m.API_WRITES.labels(verb=verb, resource=resource).inc()
        return call()

    def _create(self, action: d.CreateWorkload, key: Key) -> None:
        body = action.body
        ns = str(body["metadata"]["namespace"])
        name = str(body["metadata"]["name"])
        path = workload_resource(self.version).path(ns)
        try:
            created = self._write("create", "workloads", lambda: self.rest.create(path, body))
        except ApiError as exc:
            if exc.is_already_exists:
                # Our cache lagged (or a previous leader's create landed):
                # the watch brings it, and the next pass adopts it.
                log.info("%s/%s: Workload %s already exists; adopting it", ns, key[1], name)
                return
            raise _Retry(f"creating Workload {name}: {exc}") from exc
        m.WORKLOADS_CREATED.labels(role=action.role).inc()
        log.info("%s/%s: created Workload %s", ns, key[1], name)
        if isinstance(created, dict):
            self._remember("workload", (ns, name), None, slim_workload(created))
            with self._lock:
                self._wl_by_owner.setdefault(key, set()).add(name)

    def _lift(self, action: d.LiftGate, key: Key, pod: Obj, wl: Obj | None) -> None:
        ops = patches.lift_gate_ops(pod, action.node_selector, action.tolerations)
        path = r.PODS.path(key[0], key[1])
        try:
            patched = self._write("patch", "pods", lambda: self.rest.json_patch(path, ops))
        except ApiError as exc:
            if exc.is_not_found:
                return
            # 422 from a failed test op or 409: the pod changed since our read.
            raise _Retry(f"lifting the gate: {exc}") from exc
        now = self._clock()
        role = p.role(pod) or "unknown"
        created = parse_time(metadata(pod).get("creationTimestamp"))
        if created is not None:
            m.GATE_AGE.labels(role=role).observe(max(now - created, 0.0))
        if wl is not None:
            uid = str(metadata(wl).get("uid") or "")
            with self._lock:
                seen = self._admitted_seen.get(uid)
            if seen is None:
                seen = parse_time((w.condition(wl, w.ADMITTED) or {}).get("lastTransitionTime"))
            if seen is not None:
                m.ADMITTED_TO_LIFTED.observe(max(now - seen, 0.0))
        log.info("%s/%s: gate lifted (flavors %s)", key[0], key[1],
                 ", ".join(action.flavors) or "none")
        if isinstance(patched, dict):
            self._remember("pod", key, pod, slim_pod(patched))

    def _set_conditions(self, key: Key, workloads: dict[str, Obj], name: str,
                        update: w.ConditionUpdate) -> bool:
        wl = workloads.get(name)
        if wl is None:
            return False
        ns = str(metadata(wl).get("namespace") or key[0])
        body = w.status_apply_body(wl, [update], now_rfc3339())
        path = workload_resource(self.version).path(ns, name, "status")
        try:
            applied = self._write("apply", "workloads/status", lambda: self.rest.apply(
                path, body, self.config.field_manager, force=True))
        except ApiError as exc:
            if exc.is_not_found:
                return False  # already garbage-collected: its quota is free
            raise _Retry(f"setting {update.type} on Workload {name}: {exc}") from exc
        if isinstance(applied, dict):
            self._remember("workload", (ns, name), wl, slim_workload(applied))
            # A later action of this pass on the same Workload (finish after
            # PodsReady) must carry what this one applied.
            workloads[name] = applied
        return True

    def _delete_workload(self, action: d.DeleteWorkload, key: Key,
                         workloads: dict[str, Obj]) -> None:
        wl = workloads.get(action.workload)
        ns = str(metadata(wl).get("namespace") or key[0]) if wl is not None else key[0]
        path = workload_resource(self.version).path(ns, action.workload)
        options = {"apiVersion": "v1", "kind": "DeleteOptions",
                   "preconditions": {"uid": action.uid}} if action.uid else None
        deleted = True
        try:
            self._write("delete", "workloads", lambda: self.rest.delete(path, options))
        except ApiError as exc:
            # 404: gone already; 409: a namesake stands there now, not this pod's.
            if exc.status == 409:
                return
            if not exc.is_not_found:
                raise _Retry(f"deleting Workload {action.workload}: {exc}") from exc
            deleted = False
        if wl is not None:
            # Until the watch says so, our cache still holds it: the pod's
            # final DELETED event (kwok, or the kubelet after the grace
            # period) would otherwise make the next pass delete it again.
            gone = dict(wl)
            gone["metadata"] = {**metadata(wl), "deletionTimestamp": now_rfc3339()}
            self._remember("workload", (ns, action.workload), wl, gone)
            workloads[action.workload] = gone
        if deleted:
            m.WORKLOADS_DELETED.labels(reason=action.reason).inc()
            log.info("%s/%s: deleted Workload %s (%s)", key[0], key[1], action.workload,
                     action.reason)

    def _evict(self, action: d.EvictPod, key: Key, pod: Obj, wl: Obj | None) -> None:
        ns, name = key
        role = p.role(pod) or "unknown"
        if action.head:
            log.warning("%s/%s: Ray cluster %s taken down: its head was evicted by Kueue "
                        "(%s: %s)", ns, name, p.cluster(pod) or "?", action.reason, action.message)
        else:
            log.info("%s/%s: evicted by Kueue (%s: %s); deleting the pod", ns, name,
                     action.reason, action.message)
        body = patches.evicted_condition_body(pod, action.reason, action.message, now_rfc3339())
        try:
            self._write("apply", "pods/status", lambda: self.rest.apply(
                r.PODS.path(ns, name, "status"), body, self.config.field_manager, force=True))
        except ApiError as exc:
            if not exc.is_not_found:
                raise _Retry(f"writing the eviction condition: {exc}") from exc
        message = f"Kueue evicted Workload {action.workload}: {action.reason}: {action.message}"
        if action.head:
            message += "; the Ray cluster's head is going, KubeRay will recreate it gated"
        self._event(pod, WARNING, "Evicted", message)
        try:
            self._write("delete", "pods", lambda: self.rest.delete(
                r.PODS.path(ns, name), patches.delete_options(pod)))
        except ApiError as exc:
            # 404: gone already; 409: the uid precondition failed, a namesake
            # stands there now and is not ours to delete.
            if not (exc.is_not_found or exc.status == 409):
                raise _Retry(f"deleting the evicted pod: {exc}") from exc
        m.PODS_EVICTED.labels(role=role, reason=action.reason).inc()

    def _event(self, pod: Obj, type_: str, reason: str, message: str,
               regarding: Obj | None = None) -> None:
        if self.recorder is None:
            return
        m.API_WRITES.labels(verb="create", resource="events").inc()
        self.recorder.record(regarding if regarding is not None else pod, type_, reason, message)

    def _event_once(self, pod: Obj, type_: str, reason: str, message: str,
                    regarding: Obj | None = None) -> None:
        """Events for standing problems are sent once per pod, not per pass."""
        uid = p.uid(pod)
        target = "workload" if regarding is not None else "pod"
        with self._lock:
            sent = self._reported.setdefault(uid, set())
            if (target + reason, message) in sent:
                return
            sent.add((target + reason, message))
        self._event(pod, type_, reason, message, regarding)

    # --- gauges ---------------------------------------------------------------------------

    def _install_gauges(self) -> None:
        for role in c.MANAGED_ROLES:
            m.GATED_PODS.labels(role=role).set_function(self._gated_counter(role))

    def _uninstall_gauges(self) -> None:
        for role in c.MANAGED_ROLES:
            m.GATED_PODS.labels(role=role).set_function(lambda: 0.0)

    def _gated_counter(self, role: str) -> Callable[[], float]:
        def count() -> float:
            cache = self.pods
            if cache is None:
                return 0.0
            return float(sum(1 for pod in cache.list() if p.role(pod) == role and p.is_gated(pod)))
        return count

