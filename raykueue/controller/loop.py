"""The controller loop: caches in, `Reader` -> `decide` -> `apply` per key, writes out.

A key (`controller.keys`) names a pod, a namespace's orphaned Workloads, or a gang
cluster, whose pass is `gang.decide` over the cluster's pods and its base.

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
4. DELETE the Workload once the pod is being deleted and has stopped (every
   container terminated, or it ended), so the quota is free as soon as
   nothing runs (Kueue drops it on the delete event), and never while a long
   grace period or a preStop hook keeps it running. Marking it Finished
   instead would be one write more: ours, then the collector's delete. A pod
   that ends but stays (Succeeded, Failed) gets Finished=True, which keeps its
   outcome readable until the pod goes. A pod that is gone before we saw it
   stop (kwok, or the kubelet's final delete racing its status) is the
   Workload's only owner: the garbage collector deletes the Workload, and ours
   beside it was a second DELETE for most pods (measured: 0.8 per pod, the
   later of the two answered 404). So the collector gets a grace
   (`collector_grace_seconds`) and we delete only what it has not.

So 4 writes, or 3 where the collector deletes the Workload. An eviction takes
4 in place of step 4 (pod condition, Events, pod delete, Finished=Evicted),
after live reads that confirm it (controller/removal.py); the collector
then deletes the Workload. A Warning Event is written only
when something needs a human: a conflict, a missing WorkloadPriorityClass,
an eviction.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from raykueue.controller import actions as a
from raykueue.controller import decide as d
from raykueue.controller import metrics as m
from raykueue.controller import pods as p
from raykueue.controller import workload as w
from raykueue.controller.apply import apply
from raykueue.controller.caches import Cache, CacheFactory, Caches, discover_version
from raykueue.controller.cluster_status import ClusterStatus
from raykueue.controller.config import ControllerConfig
from raykueue.controller.gang import decide as gd
from raykueue.controller.gang.base import is_gang_pod
from raykueue.controller.handlers import Env, Pass, Recorder
from raykueue.controller.keys import GangKey, OrphansKey, PodKey, QueueKey
from raykueue.controller.reads import Reader
from raykueue.controller.retry import Retry
from raykueue.controller.state import State, owner_key
from raykueue.controller.stuck import StuckGates
from raykueue.controller.workqueue import WorkQueue
from raykueue.core import contract as c
from raykueue.core.objects import Obj, labels, metadata
from raykueue.core.podrole import role_of
from raykueue.kube.cache import DELETED, WatchCache
from raykueue.kube.informers import Informers
from raykueue.kube.rest import ApiError, Rest

log = logging.getLogger("raykueue.controller")


class Controller:
    """Caches in, `Reader` -> `decide` -> `apply` per key, writes out."""

    def __init__(self, rest: Rest, config: ControllerConfig | None = None,
                 recorder: Recorder | None = None, *,
                 cache_factory: CacheFactory = WatchCache,
                 shared: Informers | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.rest = rest
        self.config = config or ControllerConfig()
        self.recorder = recorder
        self._cache_factory = cache_factory
        # The process's running watches (the admission side's), borrowed where they serve.
        self._shared = shared
        self._clock = clock
        self.version = self.config.workload_version or w.V1BETA2
        self.queue: WorkQueue[QueueKey] = WorkQueue(
            base_delay=self.config.retry_base_seconds, max_delay=self.config.retry_max_seconds)
        self.state = State()
        self.caches: Caches | None = None
        self._reader: Reader | None = None
        self._env: Env | None = None
        self._synced = threading.Event()

    # --- public -------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def conflicts(self) -> dict[str, str]:
        """Pods left alone because something else claims them: "ns/name" -> why."""
        return self.state.conflicts()

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
            assert self.caches is not None
            workers.append(StuckGates(
                self.caches.pods.list, self._reader.sweep,
                grace_seconds=self.config.stuck_grace_seconds,
                record=self._env.event_once, requeue=lambda pod: self.queue.add(PodKey(*p.key(pod))),
                clock=self._clock).start(stop, self.config.stuck_interval_seconds))
            workers.append(self._status.start(stop))
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
        caches = Caches.open(self.rest, self.config, version, self._cache_factory,
                             self._shared)
        caches.pods.add_handler(self._on_pod)
        caches.workloads.add_handler(self._on_workload)
        caches.flavors.add_handler(self._on_placement_input)
        caches.priority_classes.add_handler(self._on_placement_input)
        caches.heads.add_handler(self._on_head)
        caches.rayclusters.add_handler(self._on_raycluster)
        # Waiting, admitted, evicted, said on the RayCluster (controller/cluster_status.py).
        self._status = ClusterStatus(caches.rayclusters.get, lambda *e: self._env.event(*e))
        caches.workloads.add_handler(self._status.on_workload)
        self.caches = caches
        self._reader = Reader(self.rest, caches, self.state, self.config, version, self._clock)
        self._env = Env(self.rest, self.config, version, self.state, self.recorder, self._clock,
                        caches.pods.get)
        caches.start()
        if not caches.wait_synced(stop, self.config.cache_sync_timeout_seconds):
            return False
        self._synced.set()
        self._install_gauges()
        self._enqueue_all()
        return True

    def stop_caches(self) -> None:
        if self.caches is not None:
            self.caches.stop()

    # --- events: the state learns, the queue gets keys ------------------------------------

    def _on_pod(self, event: str, pod: Obj) -> None:
        self.state.pod_event(event, pod, self._clock())
        key = PodKey(*p.key(pod))
        self.queue.add(key)
        self._enqueue_gang(pod)
        cluster = p.cluster(pod)
        if cluster and role_of(pod) == c.ROLE_HEAD:
            self._enqueue_waiting_workers(key.namespace, cluster)

    def _on_workload(self, event: str, wl: Obj) -> None:
        key = owner_key(wl)
        if key is None:
            return
        # Only admissions seen live are timed by us (see `State.workload_event`).
        self.state.workload_event(event, wl, key, self._clock() if self.synced else None)
        if event == DELETED:
            m.WORKLOADS_GONE.labels(role=labels(wl).get(c.NODE_TYPE_LABEL) or "unknown").inc()
        self.queue.add(key)
        cluster = labels(wl).get(c.CLUSTER_LABEL)
        owner = (self.caches.pods.get(*key.ref)
                 if isinstance(key, PodKey) and self.caches is not None else None)
        if owner is not None:
            self._enqueue_gang(owner)  # an extra's Workload came or went
        if cluster and labels(wl).get(c.NODE_TYPE_LABEL) == c.ROLE_HEAD:
            self._enqueue_waiting_workers(key.namespace, cluster)

    def _on_head(self, event: str, pod: Obj) -> None:
        # Any head, ours or not: starting, passing its gates or going may change
        # whether its cluster's workers may queue (ours also arrive through _on_pod).
        cluster = p.cluster(pod)
        if cluster:
            self._enqueue_waiting_workers(p.key(pod)[0], cluster)

    def _on_placement_input(self, event: str, obj: Obj) -> None:
        # A new ResourceFlavor or WorkloadPriorityClass may unblock gated pods.
        if not self.synced or self.caches is None:
            return
        for pod in self.caches.pods.list():
            if p.is_gated(pod):
                self.queue.add(PodKey(*p.key(pod)))

    def _on_raycluster(self, event: str, obj: Obj) -> None:
        # A gang's base follows its worker groups' minReplicas (docs/GANG.md).
        ns, name = p.key(obj)
        pods = self.caches.pods if self.caches is not None else None
        if pods is not None and any(
                x is not None and is_gang_pod(x)
                for x in (pods.get(ns, member) for member in self.state.members(ns, name))):
            self.queue.add(GangKey(ns, name))

    def _enqueue_gang(self, pod: Obj) -> None:
        gang = labels(pod).get(c.GANG_LABEL)
        if gang:
            self.queue.add(GangKey(p.key(pod)[0], gang))

    def _enqueue_waiting_workers(self, ns: str, cluster: str) -> None:
        for name in self.state.waiting_members(ns, cluster):
            self.queue.add(PodKey(ns, name))

    def _enqueue_all(self) -> None:
        assert self.caches is not None
        for pod in self.caches.pods.list():
            self.queue.add(PodKey(*p.key(pod)))
            self._enqueue_gang(pod)
        for wl in self.caches.workloads.list():
            key = owner_key(wl)
            if key is not None and w.is_ours(wl):
                self.queue.add(key)

    # --- workers ------------------------------------------------------------------------

    def _work(self, stop: threading.Event) -> None:
        while not stop.is_set():
            key = self.queue.get(timeout=0.5)
            if key is not None:
                self.process(key)

    def process(self, key: QueueKey) -> bool:
        """Reconcile a key taken from the queue; False if it was requeued."""
        try:
            self.reconcile(key)
        except Retry as exc:
            delay = self.queue.retry(key)
            log.info("%s: %s; retrying in %.2fs", key, exc, delay)
            return False
        except Exception:
            m.RECONCILE_ERRORS.inc()
            delay = self.queue.retry(key)
            log.exception("%s: reconcile failed; retrying in %.2fs", key, delay)
            return False
        else:
            self.queue.forget(key)
            return True
        finally:
            self.queue.done(key)

    def reconcile(self, key: QueueKey) -> list[a.Action]:
        """One pass for one key: read, decide, apply; returns the actions."""
        assert self._reader is not None and self._env is not None, "start() first"
        if isinstance(key, GangKey):
            return self.reconcile_gang(key)
        facts = self._reader.read(key)
        actions = d.decide(facts.pod, facts.workloads, facts.ctx)
        self._track_conflicts(key, actions)
        at = Pass(key, facts.pod, {str(metadata(x).get("name")): x for x in facts.workloads})
        timed = False
        for action in actions:
            apply(self._env, action, at)
            if isinstance(action, a.Wait) and action.after is not None:
                # A grace runs out with no event to say so: look again then.
                self.queue.add_after(key, action.after + 0.5)
                timed = True
        if isinstance(key, PodKey) and facts.pod is None and not timed:
            # A gone pod's last state is kept while a grace runs (its Workload left
            # to the garbage collector): the pass after it reads why the pod went.
            self.state.forget_pod(key.ref, facts.ctx.departed)
        return actions

    def reconcile_gang(self, key: GangKey) -> list[a.Action]:
        """One pass for one gang cluster: each step applies as its pod's (or the base's) pass.

        A pod's step runs under the pod's key, marked as the gang's (`Pass.gang`): the
        handlers note a pod it lifts or moves into the base as standing in its slot."""
        assert self._reader is not None and self._env is not None, "start() first"
        facts = self._reader.gang(key)
        steps, _ = gd.decide_gang(facts.pods, facts.own, facts.base, facts.ctx)
        by_name = {p.name(x): x for x in facts.pods}
        workloads = {p.name(x): x for x in [*facts.own.values(), facts.base] if x is not None}
        for pod_name, action in steps:
            at = (Pass(PodKey(key.namespace, pod_name), by_name.get(pod_name), workloads, gang=key)
                  if pod_name else Pass(key, None, workloads, gang=key))
            apply(self._env, action, at)
        return [x for _, x in steps]

    def _track_conflicts(self, key: PodKey | OrphansKey, actions: Iterable[a.Action]) -> None:
        conflict = next((x for x in actions if isinstance(x, a.ReportConflict)), None)
        name = str(key)
        if conflict is None:
            self.state.clear_conflict(name)
            return
        previous = self.state.set_conflict(name, conflict.kind, conflict.message)
        if previous is None or previous[0] != conflict.kind:
            m.CONFLICTS.labels(kind=conflict.kind).inc()
            log.warning("%s: %s", name, conflict.message)

    # --- gauges ---------------------------------------------------------------------------

    def _install_gauges(self) -> None:
        for role in c.MANAGED_ROLES:
            m.GATED_PODS.labels(role=role).set_function(self._gated_counter(role))

    def _uninstall_gauges(self) -> None:
        for role in c.MANAGED_ROLES:
            m.GATED_PODS.labels(role=role).set_function(lambda: 0.0)

    def _gated_counter(self, role: str) -> Callable[[], float]:
        def count() -> float:
            pods: Cache | None = self.caches.pods if self.caches is not None else None
            if pods is None:
                return 0.0
            return float(sum(1 for pod in pods.list() if role_of(pod) == role and p.is_gated(pod)))
        return count
