"""Keep every replica serving the Secret's pair; let only the leader change it.

Each replica reads the Secret through the API every `poll_seconds` (not a
mounted volume, which kubelet refreshes only every minute or so) and writes
what it holds into its cert dir, where `certs.store.CertReloader` picks it up.
The replica holding the Lease also creates and rotates the Secret
(`certs.secret.reconcile_secret`) and puts its CA bundle into both webhook
configurations, which repairs a caBundle someone reset within one tick.

A staged CA rotation (see `certs.rotation`) moves on to the new serving
certificate only after both configurations have trusted the new CA for
`settle_seconds`, read back from the API: the API server applies a changed
configuration through a watch, so a moment passes between our read and its
webhook client using the new bundle.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from certs.inject import configs_trust, inject_ca_bundle
from certs.issue import cert_to_pem, key_to_pem, new_ca, new_serving_cert
from certs.secret import read_secret_material, reconcile_secret, write_cert_files
from certs.store import TLS_CERT, TLS_KEY, write_atomic
from kube.rest import Rest

log = logging.getLogger(__name__)


def _nothing() -> None:
    return None


@dataclass
class SecretCertKeeper:
    rest: Rest
    namespace: str
    name: str
    cert_dir: Path
    dns_names: list[str]
    ip_addresses: list[str]
    is_leader: Callable[[], bool]
    # Names of the webhook configurations whose trust gates a CA switch.
    mutating_config: str | None
    validating_config: str | None
    inject: bool = True
    poll_seconds: float = 10.0
    leader_seconds: float = 10.0
    settle_seconds: float = 5.0
    on_change: Callable[[], None] = _nothing
    clock: Callable[[], float] = time.monotonic
    # True once the cert dir holds a pair read from the Secret.
    synced: bool = False
    last_error: str | None = None
    _wake: threading.Event = field(default_factory=threading.Event)
    _trusted_since: dict[bytes, float] = field(default_factory=dict)
    _pending: bool = False

    def tick(self) -> None:
        """One round: read (and, leading, advance) the Secret; serve it; inject as leader."""
        leader = self.is_leader()
        if leader:
            material, pending = reconcile_secret(
                self.rest, self.namespace, self.name, self.dns_names, self.ip_addresses,
                pending_trusted=self._settled_trust)
            if pending is None:
                self._trusted_since.clear()
            self._pending = pending is not None
        else:
            self._pending = False
            material = read_secret_material(self.rest, self.namespace, self.name)
        if material is None:
            return
        if write_cert_files(self.cert_dir, material):
            self.on_change()
        self.synced = True
        if leader and self.inject and material.ca_cert:
            inject_ca_bundle(self.rest, material.ca_cert, self.mutating_config,
                             self.validating_config)

    def _settled_trust(self, ca_pem: bytes) -> bool:
        if not configs_trust(self.rest, ca_pem, self.mutating_config, self.validating_config):
            self._trusted_since.pop(ca_pem, None)
            return False
        since = self._trusted_since.setdefault(ca_pem, self.clock())
        return self.clock() - since >= self.settle_seconds

    def wake(self) -> None:
        """Run the next tick now (leadership gained, or shutting down)."""
        self._wake.set()

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.tick()
                self.last_error = None
            except Exception as exc:  # the files on disk keep serving; the next tick retries
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


def write_placeholder(cert_dir: Path, dns_names: list[str], ip_addresses: list[str]) -> bool:
    """A throwaway self-signed pair so TLS can listen before the Secret exists.

    No `ca.crt` is written: nothing may trust or inject it, and /readyz stays
    false until the Secret's pair replaces it. Returns whether it wrote one.
    """
    cert_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    tls_crt, tls_key = cert_dir / TLS_CERT, cert_dir / TLS_KEY
    if tls_crt.exists() and tls_key.exists():
        return False
    ca, ca_key = new_ca("raykueue placeholder (not trusted)", 1)
    cert, key = new_serving_cert(ca, ca_key, dns_names, ip_addresses, 1)
    write_atomic(tls_key, key_to_pem(key), 0o600)
    write_atomic(tls_crt, cert_to_pem(cert), 0o644)
    return True
