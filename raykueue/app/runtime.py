"""Wiring: certificates, cluster caches, leader election and the controller.

This module decides nothing. `start(settings)` builds the pieces the settings
ask for, in the one order their dependencies allow, starts their threads, and
returns them as a frozen `Runtime`: the ASGI app (with the decision of each
admission path: pods' mutate and validate, Ray objects' first and last; and
the readiness checks), the TLS context to listen with, and what `shutdown()`
must stop. A configured cluster is connected in the background
(`Cluster.connect`), for as long as it takes; leadership starts once it answers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from kubernetes.client import ApiClient

from raykueue.app import certificates
from raykueue.app.certificates import Certificates
from raykueue.app.leadership import COMPONENT, ControllerHost
from raykueue.app.ownerreads import OWNER_KINDS, OwnerReads, owner_transform
from raykueue.app.server import ASGIApp, Readiness, build_app
from raykueue.app.settings import Settings
from raykueue.coexist.kueueconfig import KueueSetup, writes_pods_ready
from raykueue.coexist.policywatch import PolicyWatch
from raykueue.coexist.watcher import KueueWatch
from raykueue.controller.adopt import Adopter
from raykueue.controller.handover import HandOverEvents
from raykueue.core import contract as c
from raykueue.core.priority import PriorityPolicy
from raykueue.kube import resources as r
from raykueue.kube.backoff import Backoff
from raykueue.kube.cache import Transform, WatchCache
from raykueue.kube.client import ClusterConfigError, Configured, configured, probe
from raykueue.kube.events import EventRecorder
from raykueue.kube.informers import Informers
from raykueue.kube.rest import ApiError, Rest
from raykueue.webhooks.admit import Outcome, admit_create, admit_ray_object, admit_update
from raykueue.webhooks.rayobjects import RayObjectPolicy, Stage
from raykueue.webhooks.reads import ClusterView, keep_labels, keep_metadata, keep_value
from raykueue.webhooks.review import Review

log = logging.getLogger("raykueue")


def policy_from(settings: Settings) -> PriorityPolicy:
    return settings.priority_policy


def ray_object_policy_from(settings: Settings) -> RayObjectPolicy:
    return RayObjectPolicy(settings.autoscaler_allocate_timeout_seconds, settings.priority_policy)


def mutate_with(view: ClusterView, policy: PriorityPolicy, review: Review) -> Outcome:
    return admit_create(review, view.context_for(review.object, review.namespace), policy)


def ray_object_with(view: ClusterView, stage: Stage, policy: RayObjectPolicy, review: Review) -> Outcome:
    return admit_ray_object(review, stage, view.facts_for(review.object, review.namespace), policy)


def validate_with(controllers: frozenset[str], review: Review) -> Outcome:
    return admit_update(review, controllers)


class Cluster:
    """The configured API server, and the caches the webhook reads once it answers.

    Made at start from the configuration alone. `connect` (its own thread) asks
    GET /version until the server answers, with backoff and without end, then
    opens the caches and calls back (leadership starts then). A replica never
    falls back to admission-only because the API server did not answer when it
    started: until it does, /readyz says why it is not ready, and the webhook's
    view holds nothing, so a pod that a RayCluster may opt in is refused, never
    let through ungated.
    """

    def __init__(self, settings: Settings, found: Configured) -> None:
        self.settings = settings
        self.found = found
        self.rest = Rest(ApiClient(found.config))
        # One watch per resource in this process: the controller borrows from here.
        self.informers = Informers(self.rest)
        self.view = ClusterView.connecting()
        self.caches: tuple[WatchCache, ...] = ()  # every cache started, the Kueue watch's included
        self.kueue: KueueWatch | None = None
        # Outside `caches`: the policies are reported, never waited for.
        self.policies: PolicyWatch | None = None
        self.rayclusters: WatchCache | None = None
        # RayClusters, RayJobs and RayServices by kind (metadata only): the hand-over Events.
        self.ray_objects: dict[str, WatchCache] = {}
        self._lock = threading.Lock()
        self._stopped = False
        self._connected = threading.Event()
        self._problem = "not tried yet"

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def connect(self, stop: threading.Event, on_connected: Callable[[], None]) -> None:
        """Until `stop`: ask the server, then open the caches and call `on_connected` once."""
        s = self.settings
        backoff = Backoff(initial=min(0.5, s.connect_backoff_max_seconds),
                          cap=s.connect_backoff_max_seconds)
        said = ""
        while not stop.is_set():
            problem = probe(self.found.config, s.probe_timeout_seconds)
            if problem is None:
                try:
                    if not self._open():
                        return  # stopped meanwhile
                except ApiError as exc:  # answered /version, then went again
                    problem = f"reading API discovery: {exc}"
                else:
                    break
            delay = backoff.next()
            self._problem = f"{problem}; trying again within {delay:.1f}s"
            if problem != said:
                said = problem
                log.warning("kubernetes API at %s (%s) does not answer: %s; not ready, trying "
                            "again with backoff (admission-only only without a configured "
                            "cluster, or with RAYKUEUE_CLUSTER=false)", self.found.host,
                            self.found.source, problem)
            stop.wait(delay)
        if stop.is_set():
            return
        self._connected.set()
        log.info("connected to the kubernetes API at %s (%s)", self.found.host, self.found.source)
        on_connected()

    def _open(self) -> bool:
        """Discover the served versions and start the caches; False if stopped first."""
        rest, s = self.rest, self.settings
        ray_version = _served(rest, c.RAY_API_GROUP, "v1")
        if not ray_version:
            # Watched all the same: until KubeRay's CRDs exist the owner caches do
            # not sync and the replica is not ready, rather than read no owner for
            # good and let opted-in clusters' pods pass ungated once they do.
            log.warning("ray.io is not served: install KubeRay's CRDs; not ready until then")
        kueue_version = _served(rest, c.KUEUE_GROUP, "v1beta2", "v1beta1")
        with self._lock:
            if self._stopped:
                return False
            caches: list[WatchCache] = []

            def cache(resource: r.Resource, transform: Transform) -> WatchCache:
                made = self.informers.open(resource, transform=transform)
                caches.append(made)
                return made

            owners = {kind: cache(r.Resource(c.RAY_API_GROUP, ray_version or "v1", plural),
                                  owner_transform(kind))
                      for kind, plural in OWNER_KINDS}
            local_queues = cache(r.Resource(c.KUEUE_GROUP, kueue_version or "v1beta2",
                                            "localqueues"), keep_metadata("LocalQueue"))
            priority_classes = None
            if s.set_pod_priority:
                priority_classes = cache(
                    r.Resource("scheduling.k8s.io", "v1", "priorityclasses", namespaced=False),
                    keep_value)
            # Kueue's managedJobsNamespaceSelector selects namespaces by their labels.
            namespaces = cache(r.Resource("", "v1", "namespaces", namespaced=False), keep_labels)
            kueue = KueueWatch(rest, s.kueue_namespace, s.kueue_config_map,
                               EventRecorder(rest, "raykueue.io/coexist")).start()
            self.caches = (*caches, *kueue.caches)
            self.kueue = kueue
            self.policies = PolicyWatch(rest, c.service_account_user(
                s.pod_namespace, s.service_account)).start()
            self.rayclusters = owners[c.RAYCLUSTER_KIND]
            self.ray_objects = owners
            self.view.attach(owners, local_queues, priority_classes,
                             kueue=lambda: kueue.snapshot.setup, namespaces=namespaces,
                             live=OwnerReads.connect(self.found.config, ray_version or "v1"),
                             live_budget=s.owner_read_timeout_seconds)
        return True

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            caches = self.caches
            policies = self.policies
        for cache in caches:
            cache.stop()
        if policies is not None:
            policies.stop()

    def ready(self) -> tuple[bool, str]:
        if not self.connected:
            return False, f"connecting to {self.found.host} ({self.found.source}): {self._problem}"
        return True, f"connected to {self.found.host} ({self.found.source})"

    def caches_ready(self) -> tuple[bool, str]:
        if not self.connected:
            return False, "not connected yet"
        # Kueue's two are the "kueue" check's: a Configuration it cannot read is
        # a finding there, not a replica that never becomes ready.
        kueue = self.kueue.caches if self.kueue is not None else ()
        pending = [cache for cache in self.caches if cache not in kueue and not cache.synced]
        if pending:
            return False, "waiting for caches: " + ", ".join(
                cache.resource.plural + (f" ({cache.last_sync_error})" if cache.last_sync_error
                                         else "") for cache in pending)
        return True, f"{len(self.caches)} caches synced"

    def kueue_setup(self) -> KueueSetup | None:
        """Kueue's setup as the watch has read it (waiting up to 10 s), None before it has."""
        kueue = self.kueue
        return kueue.setup_read(10) if kueue is not None else None

    def kueue_ready(self) -> tuple[bool, str]:
        kueue = self.kueue
        return kueue.probe() if kueue is not None else (False, "not connected yet")

    def policies_ready(self) -> tuple[bool, str]:
        policies = self.policies
        return policies.probe() if policies is not None else (True, "not connected yet")


@dataclass(frozen=True, slots=True)
class Runtime:
    """Everything `start` built; `shutdown()` stops it."""

    settings: Settings
    app: ASGIApp
    certificates: Certificates
    cluster: Cluster | None
    # Campaigns for the Lease; runs the controller when it leads (if enabled).
    leadership: ControllerHost | None
    stop: threading.Event
    # Grows once the cluster answers (leadership starts then).
    threads: list[threading.Thread]

    def shutdown(self) -> None:
        self.stop.set()
        self.certificates.stop()
        if self.cluster is not None:
            self.cluster.stop()
        for thread in list(self.threads):
            thread.join(timeout=10)


def start(settings: Settings) -> Runtime:
    """The cluster (connecting in the background), certificates (they may come from a
    Secret), leadership (once the cluster answers), then the app."""
    stop = threading.Event()
    threads: list[threading.Thread] = []
    cluster = cluster_for(settings)
    rest = cluster.rest if cluster is not None else None
    leadership = None
    if rest is not None and (settings.controller or settings.cert_secret):
        leadership = ControllerHost(rest, settings, run_controller=settings.controller,
                                    # asked each time this replica starts leading
                                    pods_ready=partial(writes_pods_ready, settings.pods_ready,
                                                       cluster.kueue_setup),
                                    shared=cluster.informers)
    if settings.cert_secret:
        is_leader = leadership.is_leader if leadership is not None else _never
        certs = certificates.from_secret(settings, rest, is_leader, stop, threads)
    else:
        certs = certificates.from_cert_dir(settings, rest, stop, threads)
    readiness = [Readiness("certificates", certs.ready)]
    if cluster is not None:
        readiness.append(Readiness("cluster", cluster.ready))
        readiness.append(Readiness("caches", cluster.caches_ready))
        # Findings about Kueue's setup are reported here as detail, never as
        # unready: that would stop every opted-in Ray pod in the cluster.
        readiness.append(Readiness("kueue", cluster.kueue_ready))
        # The same for raykueue's ValidatingAdmissionPolicies: missing ones are
        # named with what is unprotected without them, never unready.
        readiness.append(Readiness("policies", cluster.policies_ready))
    if leadership is not None:
        if certs.keeper is not None:
            leadership.on_elected(certs.keeper.wake)
        if settings.controller:
            readiness.append(Readiness("controller", leadership.status))
    if cluster is not None:
        _start_thread(threads, "connect", cluster.connect, stop,
                      partial(_once_connected, cluster, leadership, settings, stop, threads))
    log.info("gate lifts allowed for: %s", ", ".join(settings.controller_identities))
    view = cluster.view if cluster is not None else ClusterView.offline()
    app = build_app(
        partial(mutate_with, view, policy_from(settings)),
        partial(validate_with, frozenset(settings.controller_identities)),
        readiness,
        settings.max_body_bytes,
        more={
            c.RAY_OBJECTS_FIRST_PATH: ("ray-objects-first", partial(
                ray_object_with, view, Stage.FIRST, ray_object_policy_from(settings))),
            c.RAY_OBJECTS_LAST_PATH: ("ray-objects-last", partial(
                ray_object_with, view, Stage.LAST, ray_object_policy_from(settings))),
        },
    )
    return Runtime(settings, app, certs, cluster, leadership, stop, threads)


def cluster_for(settings: Settings) -> Cluster | None:
    """The configured cluster, not yet connected; None (admission-only) only when none is
    configured or RAYKUEUE_CLUSTER=false. Raises ClusterConfigError when one is
    configured but cannot be loaded."""
    try:
        found = configured(settings.kubeconfig) if settings.cluster else None
    except ClusterConfigError as exc:
        raise ClusterConfigError(f"{exc}: a cluster is configured but unusable; fix that, or "
                                 "run admission-only with RAYKUEUE_CLUSTER=false") from exc
    if found is None:
        log.warning(
            "%s: running admission-only. Pods are decided from their own labels and "
            "annotations; RayCluster opt-in, default LocalQueues and the controller are "
            "unavailable", "RAYKUEUE_CLUSTER=false" if not settings.cluster
            else "no cluster configured (not in a pod, no kubeconfig)")
        return None
    return Cluster(settings, found)


def _start_thread(threads: list[threading.Thread], name: str, target: Callable[..., None],
                  *args: object) -> None:
    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    thread.start()
    threads.append(thread)


def _once_connected(cluster: Cluster, leadership: ControllerHost | None, settings: Settings,
                    stop: threading.Event, threads: list[threading.Thread]) -> None:
    """What needs the cluster's caches: the campaign for the Lease, and (with the
    controller) the adoption of opted-in clusters found running without raykueue
    (controller/adopt.py), a pass each interval and soon after a RayCluster event."""
    if leadership is None:
        return
    _start_thread(threads, "leadership", leadership.run, stop)
    if settings.controller and cluster.rayclusters is not None:
        for objects in cluster.ray_objects.values():
            # A RayJob or RayService Kueue suspends is handed over as itself: its Event goes on it.
            handovers = HandOverEvents(EventRecorder(cluster.rest, COMPONENT), leadership.is_leader)
            objects.add_handler(handovers)
            handovers.prime(objects.list())
        view = cluster.view
        adopter = Adopter(cluster.rest, cluster.rayclusters.list, view.context_for,
                          view.namespace_labels, policy_from(settings),
                          EventRecorder(cluster.rest, COMPONENT), leadership.is_leader)
        cluster.rayclusters.add_handler(adopter.wake)
        threads.append(adopter.start(stop, settings.adopt_interval_seconds))


def _never() -> bool:
    return False


def _served(rest: Rest, group: str, *preferred: str) -> str | None:
    versions = r.served_versions(rest, group)
    for version in preferred:
        if version in versions:
            return version
    return versions[0] if versions else None
