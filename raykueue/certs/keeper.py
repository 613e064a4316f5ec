"""Keep every replica serving the Secret's pair; let only the leader change it.

Each replica reads the Secret through the API every `poll_seconds` (not a
mounted volume, which kubelet refreshes only every minute or so) and hands
what it holds, as bytes, to `on_material` (the server loads it into its TLS
context; see `certs.serving`). The replica holding the Lease also creates
and rotates the Secret (`certs.secret.reconcile_secret`) and puts its CA
bundle into each of raykueue's webhook configurations, which repairs a caBundle someone
reset within one tick.

A staged CA rotation (see `certs.rotation`) moves on to the new serving
certificate only after every one of them has trusted the new CA for
`settle_seconds`, read back from the API. The stage and the time trust was
first seen are kept in the Secret, not here: a new leader carries on.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from raykueue.certs.inject import Names, configs_trust, inject_ca_bundle
from raykueue.certs.issue import cert_to_pem, key_to_pem, new_ca, new_serving_cert
from raykueue.certs.rotation import Material
from raykueue.certs.secret import read_secret_material, reconcile_secret
from raykueue.kube.rest import Rest

log = logging.getLogger(__name__)


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class SecretCertKeeper:
    rest: Rest
    namespace: str
    name: str
    dns_names: list[str]
    ip_addresses: list[str]
    is_leader: Callable[[], bool]
    # Names of the webhook configurations whose trust gates a CA switch.
    mutating_config: Names
    validating_config: Names
    # Receives the pair to serve (and the CA bundle) whenever it changes.
    on_material: Callable[[Material], None]
    inject: bool = True
    poll_seconds: float = 10.0
    leader_seconds: float = 10.0
    settle_seconds: float = 5.0
    clock: Callable[[], datetime] = _utc_now
    # True once a pair read from the Secret has been handed over.
    synced: bool = False
    last_error: str | None = None
    _wake: threading.Event = field(default_factory=threading.Event)
    _pending: bool = False
    _served: Material | None = None

    def tick(self) -> None:
        """One round: read (and, leading, advance) the Secret; serve it; inject as leader."""
        leader = self.is_leader()
        if leader:
            material, pending = reconcile_secret(
                self.rest, self.namespace, self.name, self.dns_names, self.ip_addresses,
                pending_trusted=self._trusted, now=self.clock(),
                settle=timedelta(seconds=self.settle_seconds))
            self._pending = pending is not None
        else:
            self._pending = False
            material = read_secret_material(self.rest, self.namespace, self.name)
        if material is None:
            return
        if material != self._served:
            self.on_material(material)
            self._served = material
        self.synced = True
        if leader and self.inject and material.ca_cert:
            inject_ca_bundle(self.rest, material.ca_cert, self.mutating_config,
                             self.validating_config)

    def _trusted(self, ca_pem: bytes) -> bool:
        return configs_trust(self.rest, ca_pem, self.mutating_config, self.validating_config)

    def wake(self) -> None:
        """Run the next tick now (leadership gained, or shutting down)."""
        self._wake.set()

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.tick()
                self.last_error = None
            except Exception as exc:  # the pair already loaded keeps serving; the next tick retries
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("certificate Secret %s/%s: %s", self.namespace, self.name,
                            self.last_error)
            interval = self.poll_seconds
            if self.is_leader():
                interval = min(interval, self.leader_seconds)
                if self._pending:
                    # A rotation waits on trust: look again soon rather than in a full interval.
                    interval = min(interval, max(self.settle_seconds, 0.1))
            # Jitter keeps replicas started together from reading in lockstep.
            self._wake.wait(interval * random.uniform(0.9, 1.1))
            self._wake.clear()


def placeholder_pair(dns_names: list[str], ip_addresses: list[str]) -> tuple[bytes, bytes]:
    """A throwaway self-signed pair (PEM certificate, key) so TLS can listen before the Secret exists.

    Its CA is dropped: nothing may trust or inject it, and /readyz stays false
    until the Secret's pair replaces it.
    """
    ca, ca_key = new_ca("raykueue placeholder (not trusted)", 1)
    cert, key = new_serving_cert(ca, ca_key, dns_names, ip_addresses, 1)
    return cert_to_pem(cert), key_to_pem(key)
