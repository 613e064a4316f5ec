"""Wiring: certificates, cluster caches, leader election and the controller.

This module decides nothing. It builds the pieces the settings ask for,
starts their threads, and hands the ASGI app the two decision functions and
the readiness checks.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from app.lookup import ClusterView, keep_metadata, keep_value
from app.metrics import CERT_EXPIRY, CERT_RELOADS
from app.server import ASGIApp, Readiness, build_app
from app.settings import Settings
from certs.inject import inject_ca_bundle
from certs.keeper import SecretCertKeeper, write_placeholder
from certs.store import (
    CA_CERT,
    TLS_CERT,
    TLS_KEY,
    CertPaths,
    CertReloader,
    ensure_certs,
    make_server_ssl_context,
    write_atomic,
)
from kube import resources as r
from kube.cache import WatchCache
from kube.client import load_api_client
from kube.rest import Rest
from webhooks import contract as c
from webhooks.admit import Outcome, admit_create, admit_ray_object, admit_update
from webhooks.classify import PodPriority, Policy
from webhooks.rayobjects import Stage
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


def ray_object_with(view: ClusterView, stage: Stage, review: Review) -> Outcome:
    owners = view.context_for(review.object, review.namespace).owners
    return admit_ray_object(review, owners, stage)


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
    keeper: SecretCertKeeper | None = None
    leadership: Any = None  # app.leadership.ControllerHost, when campaigning
    _listen_dir: Path | None = None

    # --- certificates ----------------------------------------------------------
    def start_certs(self) -> None:
        s = self.settings
        if s.cert_secret:
            self.cert_paths = self._start_secret_certs()
        else:
            self.cert_paths = ensure_certs(s.cert_dir, tuple(s.dns_names),
                                           tuple(s.ip_addresses))
        self.ssl_context = make_server_ssl_context(self.cert_paths)
        live = Path(s.cert_dir)
        self.reloader = CertReloader(self.ssl_context, live / TLS_CERT, live / TLS_KEY)
        self.reloader.on_reload(_cert_loaded)
        if self.keeper is not None:
            # Load a pair the keeper wrote at once, rather than at the next file poll.
            self.keeper.on_change = self.reloader.check
            thread = threading.Thread(target=self.keeper.run, args=(self.stop,),
                                      name="cert-secret", daemon=True)
            thread.start()
            self.threads.append(thread)
        elif s.inject_ca_bundle:
            self.reloader.on_reload(self._inject_ca_bundle)
            # Also on a timer: the configurations may be created (or reset by
            # a re-apply of the manifests) after this process started.
            thread = threading.Thread(target=self._keep_ca_bundle, name="ca-bundle", daemon=True)
            thread.start()
            self.threads.append(thread)
        self.reloader.start()

    def _start_secret_certs(self) -> CertPaths:
        """Serve from the Secret; until it is read, a placeholder pair and /readyz false."""
        s = self.settings
        if self.rest is None:
            raise RuntimeError(
                f"RAYKUEUE_CERT_SECRET={s.cert_secret} needs a reachable cluster to read the Secret"
            )
        assert s.cert_secret is not None
        root = Path(s.cert_dir)
        self.keeper = SecretCertKeeper(
            self.rest, s.pod_namespace, s.cert_secret, root, list(s.dns_names),
            list(s.ip_addresses), is_leader=self._is_leader,
            mutating_config=c.MUTATING_WEBHOOK_CONFIG,
            validating_config=c.VALIDATING_WEBHOOK_CONFIG, inject=s.inject_ca_bundle,
            poll_seconds=s.cert_secret_poll_seconds,
            leader_seconds=s.ca_bundle_interval_seconds,
            settle_seconds=s.ca_trust_settle_seconds)
        try:
            self.keeper.tick()  # not leading yet: only reads
        except Exception as exc:
            log.warning("reading certificate Secret %s/%s failed (retrying): %s",
                        s.pod_namespace, s.cert_secret, exc)
        if write_placeholder(root, list(s.dns_names), list(s.ip_addresses)):
            log.info("Secret %s/%s not there yet: serving a placeholder certificate, not ready",
                     s.pod_namespace, s.cert_secret)
        # The listener is set up from these paths after this returns, while the
        # keeper may be rewriting the live files (key first, then certificate):
        # a private copy of the pair as it is now keeps that load consistent.
        # The reloader watches the live files.
        self._listen_dir = Path(tempfile.mkdtemp(prefix="raykueue-listen-"))
        for name, mode in ((TLS_CERT, 0o600), (TLS_KEY, 0o600)):
            write_atomic(self._listen_dir / name, (root / name).read_bytes(), mode)
        return CertPaths(root, self._listen_dir / TLS_CERT, self._listen_dir / TLS_KEY,
                         root / CA_CERT, False)

    def _is_leader(self) -> bool:
        return self.leadership is not None and self.leadership.is_leader()

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

    def start_leadership(self) -> None:
        """Campaign for the Lease when the controller or the certificate Secret needs a leader."""
        s = self.settings
        if self.rest is None or not (s.controller or self.keeper is not None):
            return
        from app.leadership import ControllerHost

        self.leadership = ControllerHost(self.rest, s, run_controller=s.controller)
        if s.controller:
            self.controller = self.leadership
        if self.keeper is not None:
            self.leadership.on_elected(self.keeper.wake)
        thread = threading.Thread(target=self.leadership.run, args=(self.stop,),
                                  name="leadership", daemon=True)
        thread.start()
        self.threads.append(thread)

    # --- assembly --------------------------------------------------------------
    def build(self) -> ASGIApp:
        view = self.connect()  # first: certificates may come from a Secret
        self.start_certs()
        self.start_leadership()
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
            more={
                c.RAY_OBJECTS_FIRST_PATH: ("ray-objects-first", partial(ray_object_with, view, Stage.FIRST)),
                c.RAY_OBJECTS_LAST_PATH: ("ray-objects-last", partial(ray_object_with, view, Stage.LAST)),
            },
        )

    def _certs_ready(self) -> tuple[bool, str]:
        if self.reloader is None or not self.reloader.loaded:
            return False, "serving certificate not loaded"
        if self.keeper is not None and not self.keeper.synced:
            s = self.settings
            why = f": {self.keeper.last_error}" if self.keeper.last_error else ""
            return False, f"waiting for Secret {s.pod_namespace}/{s.cert_secret}{why}"
        return True, f"serving certificate valid until {self.reloader.not_after:%Y-%m-%dT%H:%M:%SZ}"

    def _caches_ready(self) -> tuple[bool, str]:
        pending = [cache.resource.plural for cache in self.caches if not cache.synced]
        if pending:
            return False, "waiting for caches: " + ", ".join(pending)
        return True, f"{len(self.caches)} caches synced"

    def shutdown(self) -> None:
        self.stop.set()
        if self.keeper is not None:
            self.keeper.wake()
        for cache in self.caches:
            cache.stop()
        if self.reloader is not None:
            self.reloader.stop()
        for thread in self.threads:
            thread.join(timeout=10)
        if self._listen_dir is not None:
            shutil.rmtree(self._listen_dir, ignore_errors=True)


def _cert_loaded(expires: datetime) -> None:
    CERT_EXPIRY.set(expires.timestamp())
    CERT_RELOADS.inc()


def _served(rest: Rest, group: str, *preferred: str) -> str | None:
    versions = r.served_versions(rest, group)
    for version in preferred:
        if version in versions:
            return version
    return versions[0] if versions else None
