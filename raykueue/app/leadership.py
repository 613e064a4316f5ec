"""Run the controller (and the certificate Secret's writer) on one replica at a time.

Every replica keeps serving webhooks. Whoever holds the Lease runs the
controller when it is enabled, and `is_leader()` tells other parts (the
certificate keeper) whether they may write.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from raykueue.app.metrics import LEADER
from raykueue.app.settings import Settings
from raykueue.controller.config import ControllerConfig
from raykueue.kube.events import EventRecorder
from raykueue.kube.informers import Informers
from raykueue.kube.leader import FailedTerms, LeaderElector, failure_backoff, run_term
from raykueue.kube.rest import Rest

if TYPE_CHECKING:  # at run time imported only once this replica leads (see _lead)
    from raykueue.controller.loop import Controller

log = logging.getLogger("raykueue.leadership")

# Shown in Events' reportingController; a qualified name, as the API requires.
COMPONENT = "raykueue.io/controller"
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def lease_namespace(settings: Settings) -> str:
    if settings.lease_namespace:
        return settings.lease_namespace
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"


def controller_config(settings: Settings, pods_ready: bool) -> ControllerConfig:
    return ControllerConfig(
        head_first=settings.head_first,
        pods_ready=pods_ready,
        workers=settings.controller_workers,
        resync_seconds=settings.resync_seconds,
        cache_sync_timeout_seconds=settings.cache_sync_timeout_seconds,
        stuck_interval_seconds=settings.stuck_interval_seconds,
        stuck_grace_seconds=settings.stuck_grace_seconds,
        outside_quota_grace_seconds=settings.outside_quota_grace_seconds,
        collector_grace_seconds=settings.collector_grace_seconds,
        enforcement=settings.enforcement,
    )


class ControllerHost:
    """Campaigns for the Lease and runs a fresh Controller each time it leads.

    `status()` feeds /readyz: leading or standing by, and the pods the
    controller leaves alone because Kueue also claims them.
    """

    def __init__(self, rest: Rest, settings: Settings, *, run_controller: bool = True,
                 pods_ready: Callable[[], bool] | None = None,
                 shared: Informers | None = None) -> None:
        self.rest = rest
        self.settings = settings
        self.run_controller = run_controller
        # Asked at the start of each term: whether to write PodsReady (kueueconfig.writes_pods_ready).
        self.pods_ready = pods_ready or (lambda: settings.pods_ready != "false")
        # The process's watches: each term's controller borrows what they hold.
        self.shared = shared
        self.controller: Controller | None = None
        self._lost: threading.Event | None = None
        self._on_elected: list[Callable[[], None]] = []
        self._failure: Callable[[], str | None] = _no_failure
        # Hostname alone repeats across restarts of one pod; the suffix makes a
        # restarted process a new candidate rather than the old holder.
        host = os.environ.get("HOSTNAME") or socket.gethostname()
        self.identity = f"{host}_{uuid.uuid4().hex[:8]}"

    def run(self, stop: threading.Event) -> None:
        s = self.settings
        if not s.leader_election:
            self._run_alone(stop)
            return
        namespace = lease_namespace(s)
        elector = LeaderElector(self.rest, namespace, s.lease_name, self.identity,
                                lease_seconds=s.lease_seconds, renew_seconds=s.renew_seconds,
                                retry_seconds=s.retry_seconds)
        self._failure = lambda: elector.failure
        log.info("campaigning for lease %s/%s as %s", namespace, s.lease_name, self.identity)
        elector.run(self._lead, stop)

    def _run_alone(self, stop: threading.Event) -> None:
        """Lead without a Lease; work that ends by itself is restarted after the same backoff."""
        failed = FailedTerms(failure_backoff(self.settings.retry_seconds))
        self._failure = lambda: failed.reason
        while not stop.is_set():
            started = time.monotonic()
            failed.ended(run_term(self._lead, stop), time.monotonic() - started, stop)

    def is_leader(self) -> bool:
        """True between gaining the Lease and the moment its loss is noticed."""
        lost = self._lost
        return lost is not None and not lost.is_set()

    def on_elected(self, fn: Callable[[], None]) -> None:
        self._on_elected.append(fn)

    def _lead(self, lost: threading.Event) -> None:
        self._lost = lost
        LEADER.set(1)
        for fn in self._on_elected:
            try:
                fn()
            except Exception:
                log.exception("on-elected hook %r failed", fn)
        try:
            if not self.run_controller:
                lost.wait()
                return
            from raykueue.controller.loop import Controller

            controller = Controller(self.rest, controller_config(self.settings, self.pods_ready()),
                                    EventRecorder(self.rest, COMPONENT), shared=self.shared)
            self.controller = controller
            try:
                controller.run(lost)
            finally:
                self.controller = None
        finally:
            self._lost = None
            LEADER.set(0)

    def status(self) -> tuple[bool, str]:
        failure = self._failure()
        if failure is not None:
            # Not ready: the Service then sends reviews to replicas whose
            # controller works, and an operator sees why this one does not.
            return False, f"not leading: the controller ended ({failure}); campaigning again after a backoff"
        controller = self.controller
        if controller is None:
            return True, "standing by (another replica leads, or the Lease is being acquired)"
        conflicts = controller.conflicts()
        if not conflicts:
            return True, "leading"
        shown = "; ".join(f"{pod}: {why}" for pod, why in sorted(conflicts.items())[:5])
        more = f" (+{len(conflicts) - 5} more)" if len(conflicts) > 5 else ""
        # Still ready: those pods are Kueue's to admit, and every other pod is served.
        return True, f"leading; {len(conflicts)} pod(s) left to Kueue: {shown}{more}"


def _no_failure() -> str | None:
    return None
