"""Wiring: certificates, cluster caches, leader election and the controller.

This module decides nothing. `start(settings)` builds the pieces the settings
ask for, in the one order their dependencies allow, starts their threads, and
returns them as a frozen `Runtime`: the ASGI app (with the decision of each
admission path: pods' mutate and validate, Ray objects' first and last; and
the readiness checks), the TLS context to listen with, and
what `shutdown()` must stop.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from functools import partial

from raykueue.app import certificates
from raykueue.app.certificates import Certificates
from raykueue.app.leadership import COMPONENT, ControllerHost
from raykueue.app.lookup import ClusterView, keep_labels, keep_metadata, keep_value
from raykueue.app.server import ASGIApp, Readiness, build_app
from raykueue.app.settings import Settings
from raykueue.coexist.watcher import KueueWatch
from raykueue.controller.unaccounted import UnaccountedPods
from raykueue.core import contract as c
from raykueue.kube import resources as r
from raykueue.kube.cache import Transform, WatchCache
from raykueue.kube.client import load_api_client
from raykueue.kube.events import EventRecorder
from raykueue.kube.rest import Rest
from raykueue.webhooks.admit import Outcome, admit_create, admit_ray_object, admit_update
from raykueue.webhooks.classify import PodPriority, Policy
from raykueue.webhooks.rayobjects import RayObjectPolicy, Stage
from raykueue.webhooks.review import Review

log = logging.getLogger("raykueue")


def policy_from(settings: Settings) -> Policy:
    pod_priority = (
        PodPriority(settings.head_pod_priority_class, settings.worker_pod_priority_class)
        if settings.set_pod_priority
        else None
    )
    return Policy(settings.head_priority_class, settings.worker_priority_class, pod_priority,
                  settings.head_only_classes)


def ray_object_policy_from(settings: Settings) -> RayObjectPolicy:
    return RayObjectPolicy(settings.autoscaler_allocate_timeout_seconds, settings.head_only_classes)


def mutate_with(view: ClusterView, policy: Policy, review: Review) -> Outcome:
    return admit_create(review, view.context_for(review.object, review.namespace), policy)


def ray_object_with(view: ClusterView, stage: Stage, policy: RayObjectPolicy, review: Review) -> Outcome:
    return admit_ray_object(review, stage, view.facts_for(review.object, review.namespace), policy)


def pods_ready_with(settings: Settings, kueue: KueueWatch | None) -> bool:
    """Whether the controller writes PodsReady: forced by the setting, else what Kueue reads.

    Asked each time this replica starts leading. Without Kueue's Configuration the
    answer is yes: a needless write costs one call, a missing one an eviction.
    """
    if settings.pods_ready != "auto":
        return settings.pods_ready == "true"
    if kueue is None or not all(cache.wait_synced(10) for cache in kueue.caches):
        return True
    return kueue.snapshot.setup.wait_for_pods_ready


def validate_with(controllers: frozenset[str], review: Review) -> Outcome:
    return admit_update(review, controllers)


@dataclass(frozen=True, slots=True)
class Cluster:
    """The API server and the caches the webhook reads."""

    rest: Rest
    view: ClusterView
    caches: tuple[WatchCache, ...]  # every cache started, the Kueue watch's included
    kueue: KueueWatch

    def ready(self) -> tuple[bool, str]:
        pending = [cache.resource.plural for cache in self.caches if not cache.synced]
        if pending:
            return False, "waiting for caches: " + ", ".join(pending)
        return True, f"{len(self.caches)} caches synced"


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
    threads: tuple[threading.Thread, ...]

    def shutdown(self) -> None:
        self.stop.set()
        self.certificates.stop()
        if self.cluster is not None:
            for cache in self.cluster.caches:
                cache.stop()
        for thread in self.threads:
            thread.join(timeout=10)


def start(settings: Settings) -> Runtime:
    """Connect, then certificates (they may come from a Secret), then leadership, then the app."""
    stop = threading.Event()
    threads: list[threading.Thread] = []
    cluster = connect(settings)
    rest = cluster.rest if cluster is not None else None
    leadership = None
    if rest is not None and (settings.controller or settings.cert_secret):
        leadership = ControllerHost(rest, settings, run_controller=settings.controller,
                                    pods_ready=partial(pods_ready_with, settings, cluster.kueue
                                                       if cluster is not None else None))
    if settings.cert_secret:
        is_leader = leadership.is_leader if leadership is not None else _never
        certs = certificates.from_secret(settings, rest, is_leader, stop, threads)
    else:
        certs = certificates.from_cert_dir(settings, rest, stop, threads)
    readiness = [Readiness("certificates", certs.ready)]
    if cluster is not None:
        readiness.append(Readiness("caches", cluster.ready))
        # Findings about Kueue's setup are reported here as detail, never as
        # unready: that would stop every opted-in Ray pod in the cluster.
        readiness.append(Readiness("kueue", cluster.kueue.probe))
    if leadership is not None:
        if certs.keeper is not None:
            leadership.on_elected(certs.keeper.wake)
        thread = threading.Thread(target=leadership.run, args=(stop,), name="leadership",
                                  daemon=True)
        thread.start()
        threads.append(thread)
        if settings.controller:
            readiness.append(Readiness("controller", leadership.status))
            rayclusters = cluster.view.owners.get(c.RAYCLUSTER_KIND) if cluster is not None else None
            if cluster is not None and rayclusters is not None:
                # Pods of opted-in clusters that the legacy webhook let through ungated.
                threads.append(UnaccountedPods(
                    cluster.rest, rayclusters.list, EventRecorder(cluster.rest, COMPONENT),
                    leadership.is_leader).start(stop, settings.unaccounted_interval_seconds))
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
    return Runtime(settings, app, certs, cluster, leadership, stop, tuple(threads))


def connect(settings: Settings) -> Cluster | None:
    """The cluster's caches, started; None (admission-only) when no cluster answers."""
    s = settings
    api = load_api_client(s.kubeconfig, probe_timeout=s.probe_timeout_seconds) if s.cluster else None
    if api is None:
        log.warning(
            "no cluster reachable: running admission-only. Pods are decided from their own "
            "labels and annotations; RayCluster opt-in, default LocalQueues and the "
            "controller are unavailable"
        )
        return None
    rest = Rest(api)
    caches: list[WatchCache] = []

    def cache(resource: r.Resource, transform: Transform) -> WatchCache:
        made = WatchCache(rest, resource, transform=transform)
        made.start()
        caches.append(made)
        return made

    owners: dict[str, WatchCache] = {}
    ray_version = _served(rest, c.RAY_API_GROUP, "v1")
    if ray_version:
        for kind, plural in (
            (c.RAYCLUSTER_KIND, "rayclusters"),
            (c.RAYJOB_KIND, "rayjobs"),
            (c.RAYSERVICE_KIND, "rayservices"),
        ):
            owners[kind] = cache(r.Resource(c.RAY_API_GROUP, ray_version, plural),
                                 keep_metadata(kind))
    else:
        log.warning("ray.io is not served: install KubeRay's CRDs; opt-in on RayClusters "
                    "cannot be read until then")
    kueue_version = _served(rest, c.KUEUE_GROUP, "v1beta2", "v1beta1")
    local_queues = cache(r.Resource(c.KUEUE_GROUP, kueue_version or "v1beta2", "localqueues"),
                         keep_metadata("LocalQueue"))
    priority_classes = None
    if s.set_pod_priority:
        priority_classes = cache(
            r.Resource("scheduling.k8s.io", "v1", "priorityclasses", namespaced=False),
            keep_value)
    # Kueue's managedJobsNamespaceSelector selects namespaces by their labels.
    namespaces = cache(r.Resource("", "v1", "namespaces", namespaced=False), keep_labels)
    kueue = KueueWatch(rest, s.kueue_namespace, s.kueue_config_map,
                       EventRecorder(rest, "raykueue.io/coexist")).start()
    caches += kueue.caches
    view = ClusterView(owners, local_queues, priority_classes, kueue=lambda: kueue.snapshot.setup,
                       namespaces=namespaces)
    return Cluster(rest, view, tuple(caches), kueue)


def _never() -> bool:
    return False


def _served(rest: Rest, group: str, *preferred: str) -> str | None:
    versions = r.served_versions(rest, group)
    for version in preferred:
        if version in versions:
            return version
    return versions[0] if versions else None
