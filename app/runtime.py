"""Wiring: certificates, cluster caches, leader election and the controller.

This module decides nothing. It builds the pieces the settings ask for,
starts their threads, and hands the ASGI app the two decision functions and
the readiness checks.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

from app.lookup import ClusterView, keep_metadata, keep_value
from app.metrics import CERT_EXPIRY, CERT_RELOADS
from app.server import ASGIApp, Readiness, build_app
from app.settings import Settings
from certs.inject import inject_ca_bundle
from certs.secret import ensure_secret_certs, keep_secret_certs
from certs.store import CertPaths, CertReloader, ensure_certs, make_server_ssl_context
from kube import resources as r
from kube.cache import WatchCache
from kube.client import load_api_client
from kube.rest import Rest
from webhooks import contract as c
from webhooks.admit import Outcome, admit_create, admit_update
from webhooks.classify import PodPriority, Policy
from webhooks.review import Review

log = logging.getLogger("raykueue")


def policy_from(settings: Settings) -> Policy:
    pod_priority = (
        PodPriority(settings.head_pod_priority_class, settings.worker_pod_priority_class)
        if settings.set_pod_priority
        else None
    )
    return Policy(settings.head_priority_class, settings.worker_priority_class, pod_priority)


def mutate_with(view: ClusterView, policy: Policy, review: Review) -> Outcome:
    return admit_create(review, view.context_for(review.object, review.namespace), policy)


def validate_with(controllers: frozenset[str], review: Review) -> Outcome:
    return admit_update(review, controllers)


@dataclass
class Runtime:
    settings: Settings
    stop: threading.Event = field(default_factory=threading.Event)
    caches: list[WatchCache] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)
    controller: Any = None
    rest: Rest | None = None
    cert_paths: CertPaths | None = None
    reloader: CertReloader | None = None
    ssl_context: Any = None

    # --- certificates ----------------------------------------------------------
    def start_certs(self) -> None:
        s = self.settings
        if s.cert_secret:
            self._sync_secret_certs()
        self.cert_paths = ensure_certs(s.cert_dir, tuple(s.dns_names), tuple(s.ip_addresses))
        self.ssl_context = make_server_ssl_context(self.cert_paths)
        self.reloader = CertReloader(
            self.ssl_context, self.cert_paths.tls_cert, self.cert_paths.tls_key
        )
        self.reloader.on_reload(_cert_loaded)
        if s.inject_ca_bundle:
            self.reloader.on_reload(self._inject_ca_bundle)
            # Also on a timer: the configurations may be created (or reset by
            # a re-apply of the manifests) after this process started.
            thread = threading.Thread(target=self._keep_ca_bundle, name="ca-bundle", daemon=True)
            thread.start()
            self.threads.append(thread)
        self.reloader.start()

    def _sync_secret_certs(self) -> None:
        s = self.settings
        if self.rest is None:
            raise RuntimeError(
                f"RAYKUEUE_CERT_SECRET={s.cert_secret} needs a reachable cluster to read the Secret"
            )
        assert s.cert_secret is not None
        args = (self.rest, s.pod_namespace, s.cert_secret, s.cert_dir, s.dns_names,
                s.ip_addresses)
        ensure_secret_certs(*args)
        # Another replica may rotate the pair; the reloader then sees new files.
        thread = threading.Thread(target=keep_secret_certs, args=(*args, self.stop),
                                  name="cert-secret", daemon=True)
        thread.start()
        self.threads.append(thread)

    def _keep_ca_bundle(self) -> None:
        while not self.stop.wait(self.settings.ca_bundle_interval_seconds):
            try:
                self._inject_ca_bundle(None)
            except Exception as exc:  # the API may be briefly away; next tick retries
                log.warning("caBundle injection failed: %s", exc)

    def _inject_ca_bundle(self, _expires: datetime | None) -> None:
        if self.rest is None or self.cert_paths is None:
            return
        ca_pem = self.cert_paths.ca_pem()
        if ca_pem is None:
            log.warning("no ca.crt next to the serving certificate: caBundle not injected")
            return
        changed = inject_ca_bundle(self.rest, ca_pem, c.MUTATING_WEBHOOK_CONFIG,
                                   c.VALIDATING_WEBHOOK_CONFIG)
        if changed:
            log.info("injected the CA into %d webhook(s)", changed)

    # --- cluster ---------------------------------------------------------------
    def connect(self) -> ClusterView:
        s = self.settings
        api = load_api_client(s.kubeconfig, probe_timeout=s.probe_timeout_seconds) if s.cluster else None
        if api is None:
            log.warning(
                "no cluster reachable: running admission-only. Pods are decided from their own "
                "labels and annotations; RayCluster opt-in, default LocalQueues and the "
                "controller are unavailable"
            )
            return ClusterView.offline()
        self.rest = Rest(api)
        owners: dict[str, WatchCache] = {}
        ray_version = _served(self.rest, c.RAY_API_GROUP, "v1")
        if ray_version:
            for kind, plural in (
                (c.RAYCLUSTER_KIND, "rayclusters"),
                (c.RAYJOB_KIND, "rayjobs"),
                (c.RAYSERVICE_KIND, "rayservices"),
            ):
                owners[kind] = self._cache(
                    r.Resource(c.RAY_API_GROUP, ray_version, plural), keep_metadata(kind)
                )
        else:
            log.warning("ray.io is not served: install KubeRay's CRDs; opt-in on RayClusters "
                        "cannot be read until then")
        kueue_version = _served(self.rest, c.KUEUE_GROUP, "v1beta2", "v1beta1")
        local_queues = self._cache(
            r.Resource(c.KUEUE_GROUP, kueue_version or "v1beta2", "localqueues"),
            keep_metadata("LocalQueue"),
        )
        priority_classes = None
        if self.settings.set_pod_priority:
            priority_classes = self._cache(
                r.Resource("scheduling.k8s.io", "v1", "priorityclasses", namespaced=False),
                keep_value,
            )
        return ClusterView(owners, local_queues, priority_classes)

    def _cache(self, resource: r.Resource, transform: Any) -> WatchCache:
        assert self.rest is not None
        cache = WatchCache(self.rest, resource, transform=transform)
        cache.start()
        self.caches.append(cache)
        return cache

    def start_controller(self) -> None:
        if self.rest is None or not self.settings.controller:
            return
        from app.leadership import ControllerHost

        self.controller = ControllerHost(self.rest, self.settings)
        thread = threading.Thread(target=self.controller.run, args=(self.stop,),
                                  name="controller", daemon=True)
        thread.start()
        self.threads.append(thread)

    # --- assembly --------------------------------------------------------------
    def build(self) -> ASGIApp:
        view = self.connect()  # first: certificates may come from a Secret
        self.start_certs()
        self.start_controller()
        readiness = [Readiness("certificates", self._certs_ready)]
        if view.online:
            readiness.append(Readiness("caches", self._caches_ready))
        if self.controller is not None:
            readiness.append(Readiness("controller", self.controller.status))
        return build_app(
            partial(mutate_with, view, policy_from(self.settings)),
            partial(validate_with, frozenset(self.settings.controller_identities)),
            readiness,
            self.settings.max_body_bytes,
        )

    def _certs_ready(self) -> tuple[bool, str]:
        if self.reloader is None or not self.reloader.loaded:
            return False, "serving certificate not loaded"
        return True, f"serving certificate valid until {self.reloader.not_after:%Y-%m-%dT%H:%M:%SZ}"

    def _caches_ready(self) -> tuple[bool, str]:
        pending = [cache.resource.plural for cache in self.caches if not cache.synced]
        if pending:
            return False, "waiting for caches: " + ", ".join(pending)
        return True, f"{len(self.caches)} caches synced"

    def shutdown(self) -> None:
        self.stop.set()
        for cache in self.caches:
            cache.stop()
        if self.reloader is not None:
            self.reloader.stop()
        for thread in self.threads:
            thread.join(timeout=10)


def _cert_loaded(expires: datetime) -> None:
    CERT_EXPIRY.set(expires.timestamp())
    CERT_RELOADS.inc()


def _served(rest: Rest, group: str, *preferred: str) -> str | None:
    versions = r.served_versions(rest, group)
    for version in preferred:
        if version in versions:
            return version
    return versions[0] if versions else None
