"""The certificate Secret as a cert dir, for tests that compare what replicas would serve.

The server itself never writes the Secret's pair to disk (the keeper hands
it to the TLS context as bytes, see `certs.serving`); these tests read the
material back as the kubernetes.io/tls files a mounted Secret would give.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from raykueue.certs.rotation import CA_CERT, TLS_CERT, TLS_KEY, Material
from raykueue.certs.secret import SecretApi, reconcile_secret
from raykueue.certs.store import write_atomic


def ensure_secret_certs(rest: SecretApi, namespace: str, name: str,
                        cert_dir: str | os.PathLike[str], dns_names: Iterable[str],
                        ip_addresses: Iterable[str], **options: Any) -> None:
    """`reconcile_secret`, then write what to serve into `cert_dir` (see `write_cert_files`)."""
    material, _pending = reconcile_secret(rest, namespace, name, dns_names, ip_addresses,
                                          **options)
    if material is not None:
        write_cert_files(cert_dir, material)


def write_cert_files(cert_dir: str | os.PathLike[str], material: Material) -> bool:
    """Write `ca.crt`, `tls.key`, `tls.crt`; returns whether anything changed.

    Unchanged files are not rewritten, so a watcher sees no spurious reload.
    The key goes before the certificate; a watcher that catches the pair
    mismatched in between keeps its previous pair until the next change.
    The CA key is never written to disk.
    """
    root = Path(cert_dir)
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    changed = False
    for filename, data, mode in ((CA_CERT, material.ca_cert, 0o644),
                                 (TLS_KEY, material.tls_key, 0o600),
                                 (TLS_CERT, material.tls_cert, 0o644)):
        target = root / filename
        if not data:
            # A Secret without a CA: a stale ca.crt here would be injected
            # as the caBundle and break every call.
            if target.exists():
                target.unlink()
                changed = True
            continue
        try:
            if target.read_bytes() == data:
                continue
        except OSError:
            pass
        write_atomic(target, data, mode)
        changed = True
    return changed
