"""Share one CA and serving certificate between replicas through a Secret.

Every replica of a multi-replica install must present a certificate that the
webhook configurations' single `caBundle` trusts, so the CA cannot be made up
per pod. The first replica to start issues a CA and a serving certificate and
creates the Secret; the others find it (or lose the create race and read the
winner's) and serve the same pair.

The Secret is `kubernetes.io/tls` with `tls.crt`, `tls.key` and `ca.crt`, plus
`ca.key` so that any replica can later reissue the serving certificate from the
same CA. Rotation keeps the CA (the caBundle does not change) and, when it
happens because a SAN is missing, also the SANs already served, so replicas
with different SAN lists (a rolling change) converge instead of taking turns.
Only a CA that is itself about to expire is replaced, and then `ca.crt`
carries the new CA followed by the old one until the old one expires, so both
the old and the new serving certificates stay trusted while replicas catch up.

Writes are conditional on the resourceVersion that was read: two replicas
rotating at once cannot both win, and the loser adopts the winner's result.

A Secret without `ca.key` (cert-manager, an operator, a human) is someone
else's to rotate: its pair is served as given and never rewritten.

Nothing here logs key material: only names, reasons and dates.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import ipaddress
import logging
import os
import random
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization

from certs.issue import (
    IssuerKey,
    cert_to_pem,
    key_from_pem,
    key_to_pem,
    new_ca,
    new_serving_cert,
)
from certs.store import write_atomic
from kube.resources import Resource
from kube.rest import ApiError

log = logging.getLogger(__name__)

SECRETS = Resource("", "v1", "secrets")
TLS_SECRET_TYPE = "kubernetes.io/tls"
CA_CERT, CA_KEY, TLS_CERT, TLS_KEY = "ca.crt", "ca.key", "tls.crt", "tls.key"

RENEW_WITHIN = timedelta(days=30)
_LACKS_SANS = "serving certificate lacks SAN(s) "
CA_DAYS = 3650
SERVING_DAYS = 365
MAX_ATTEMPTS = 5


class SecretApi(Protocol):
    """The part of `kube.rest.Rest` this module uses."""

    def get(self, path: str) -> Any: ...

    def create(self, path: str, body: Mapping[str, Any]) -> Any: ...

    def replace(self, path: str, body: Mapping[str, Any]) -> Any: ...


@dataclass(frozen=True, slots=True)
class Material:
    """PEM bytes as stored in the Secret; `ca_key` is None when not ours."""

    ca_cert: bytes
    tls_cert: bytes
    tls_key: bytes
    ca_key: bytes | None = None

    def data(self) -> dict[str, str]:
        out = {CA_CERT: self.ca_cert, TLS_CERT: self.tls_cert, TLS_KEY: self.tls_key}
        if self.ca_key is not None:
            out[CA_KEY] = self.ca_key
        return {k: base64.b64encode(v).decode("ascii") for k, v in out.items()}


# -- the decision (pure) -----------------------------------------------------------


def needs_rotation(cert_pem: bytes, dns_names: Iterable[str], now: datetime, *,
                   ip_addresses: Iterable[str] = (), renew_within: timedelta = RENEW_WITHIN,
                   ca_pem: bytes | None = None) -> str | None:
    """Why the serving certificate `cert_pem` must be reissued, or None.

    Reasons: unreadable, not yet valid, expiring within `renew_within`,
    missing one of the SANs we serve on, or (with `ca_pem`) not issued by the
    first certificate of `ca_pem`.
    """
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        return "serving certificate is unreadable"
    if now < cert.not_valid_before_utc:
        return f"serving certificate is not valid before {_iso(cert.not_valid_before_utc)}"
    expires = cert.not_valid_after_utc
    if expires - now < renew_within:
        return f"serving certificate expires {_iso(expires)} (within {renew_within.days} days)"
    missing = _missing_sans(cert, dns_names, ip_addresses)
    if missing:
        return _LACKS_SANS + ", ".join(missing)
    if ca_pem is not None:
        try:
            ca = x509.load_pem_x509_certificate(ca_pem)
            cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            return "serving certificate is not issued by the stored CA"
    return None


def ca_needs_rotation(ca_pem: bytes, ca_key_pem: bytes, now: datetime, *,
                      renew_within: timedelta = RENEW_WITHIN) -> str | None:
    """Why the stored CA cannot sign a fresh serving certificate, or None.

    A serving certificate never outlives its CA, so a CA within
    `renew_within` of expiry would make every reissue due again at once.
    """
    try:
        ca = x509.load_pem_x509_certificate(ca_pem)
        key = key_from_pem(ca_key_pem)
    except ValueError:
        return "CA certificate or key is unreadable"
    if _public_der(ca.public_key()) != _public_der(key.public_key()):
        return "CA key does not match the CA certificate"
    if ca.not_valid_after_utc - now < renew_within:
        return f"CA expires {_iso(ca.not_valid_after_utc)} (within {renew_within.days} days)"
    return None


def _missing_sans(cert: x509.Certificate, dns_names: Iterable[str],
                  ip_addresses: Iterable[str]) -> list[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        have_dns: set[str] = set()
        have_ips: set[Any] = set()
    else:
        have_dns = {d.lower() for d in san.get_values_for_type(x509.DNSName)}
        have_ips = set(san.get_values_for_type(x509.IPAddress))
    missing = [d for d in dns_names if d.lower() not in have_dns]
    missing += [ip for ip in ip_addresses if ipaddress.ip_address(ip) not in have_ips]
    return missing


def _public_der(public_key: Any) -> bytes:
    return public_key.public_bytes(serialization.Encoding.DER,
                                   serialization.PublicFormat.SubjectPublicKeyInfo)


def _iso(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


# -- issuing -------------------------------------------------------------------------


def issue_material(dns_names: list[str], ip_addresses: list[str], *,
                   ca_days: int = CA_DAYS, serving_days: int = SERVING_DAYS) -> Material:
    """A new CA and a serving certificate signed by it."""
    ca, ca_key = new_ca(f"{(dns_names + ip_addresses)[0]} CA", ca_days)
    return _serve_from(cert_to_pem(ca), ca, ca_key, dns_names, ip_addresses, serving_days)


def _serve_from(ca_bundle: bytes, ca: x509.Certificate, ca_key: IssuerKey,
                dns_names: list[str], ip_addresses: list[str], serving_days: int) -> Material:
    cert, key = new_serving_cert(ca, ca_key, dns_names, ip_addresses, serving_days)
    return Material(ca_bundle, cert_to_pem(cert), key_to_pem(key), key_to_pem(ca_key))


def _rotate_ca(old_bundle: bytes, dns_names: list[str], ip_addresses: list[str], now: datetime,
               ca_days: int, serving_days: int) -> Material:
    """New CA; the old CAs still valid stay in `ca.crt` behind it."""
    fresh = issue_material(dns_names, ip_addresses, ca_days=ca_days, serving_days=serving_days)
    kept = [c for c in _load_bundle(old_bundle) if c.not_valid_after_utc > now]
    bundle = fresh.ca_cert + b"".join(cert_to_pem(c) for c in kept)
    return Material(bundle, fresh.tls_cert, fresh.tls_key, fresh.ca_key)


def _load_bundle(pem: bytes) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError:
        return []


# -- the Secret ----------------------------------------------------------------------


def _decode(secret: Mapping[str, Any]) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for key, value in (secret.get("data") or {}).items():
        if isinstance(value, str):
            with contextlib.suppress(binascii.Error, ValueError):
                out[key] = base64.b64decode(value, validate=True)
    return out


def _secret_body(namespace: str, name: str, material: Material,
                 labels: Mapping[str, str] | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "Secret", "metadata": metadata,
            "type": TLS_SECRET_TYPE, "data": material.data()}


def _updated(secret: Mapping[str, Any], material: Material) -> dict[str, Any]:
    """The Secret as read, with new data; its resourceVersion makes the PUT conditional."""
    body = dict(secret)
    metadata = dict(body.get("metadata") or {})
    metadata.pop("managedFields", None)  # omitted: the server keeps them
    body["metadata"] = metadata
    data = dict(body.get("data") or {})
    data.update(material.data())
    body["data"] = data
    return body


def _plan(stored: dict[str, bytes], dns: list[str], ips: list[str], now: datetime,
          renew_within: timedelta, ca_days: int, serving_days: int
          ) -> tuple[Material | None, Material | None, str | None]:
    """(material to serve as is, material to write, reason for writing)."""
    ca_crt, ca_key = stored.get(CA_CERT), stored.get(CA_KEY)
    tls_crt, tls_key = stored.get(TLS_CERT), stored.get(TLS_KEY)

    if ca_key is None:
        # Not ours to rotate: serve what is there (if anything is).
        if tls_crt and tls_key:
            reason = needs_rotation(tls_crt, dns, now, ip_addresses=ips,
                                    renew_within=renew_within)
            if reason:
                log.warning("serving as given, not rotating (no %s in the Secret): %s",
                            CA_KEY, reason)
            return Material(ca_crt or b"", tls_crt, tls_key), None, None
        return None, issue_material(dns, ips, ca_days=ca_days, serving_days=serving_days), (
            "Secret holds neither a serving pair nor a CA key")

    ca_reason = ca_needs_rotation(ca_crt or b"", ca_key, now, renew_within=renew_within)
    if ca_reason:
        return None, _rotate_ca(ca_crt or b"", dns, ips, now, ca_days, serving_days), ca_reason

    reason = (needs_rotation(tls_crt, dns, now, ip_addresses=ips, renew_within=renew_within,
                             ca_pem=ca_crt)
              if tls_crt and tls_key else "serving pair missing")
    if reason is None and tls_crt and tls_key and not _pair_matches(tls_crt, tls_key):
        reason = "serving key does not match the serving certificate"
    if reason is None:
        assert ca_crt and tls_crt and tls_key
        return Material(ca_crt, tls_crt, tls_key, ca_key), None, None
    assert ca_crt
    if tls_crt and reason.startswith(_LACKS_SANS):
        # Keep the names already served: during a rolling change of the SAN
        # list, old and new replicas would otherwise take turns rotating.
        dns, ips = _union_sans(tls_crt, dns, ips)
    ca = x509.load_pem_x509_certificates(ca_crt)[0]
    return None, _serve_from(ca_crt, ca, key_from_pem(ca_key), dns, ips, serving_days), reason


def _union_sans(cert_pem: bytes, dns: list[str], ips: list[str]) -> tuple[list[str], list[str]]:
    try:
        san = x509.load_pem_x509_certificate(cert_pem).extensions.get_extension_for_class(
            x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return dns, ips
    have_dns = list(san.get_values_for_type(x509.DNSName))
    have_ips = [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]
    lower = {d.lower() for d in dns}
    wanted_ips = {ipaddress.ip_address(ip) for ip in ips}
    return (dns + [d for d in have_dns if d.lower() not in lower],
            ips + [ip for ip in have_ips if ipaddress.ip_address(ip) not in wanted_ips])


def _pair_matches(cert_pem: bytes, key_pem: bytes) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return False
    return _public_der(cert.public_key()) == _public_der(key.public_key())


def ensure_secret_certs(rest: SecretApi, namespace: str, name: str,
                        cert_dir: str | os.PathLike[str], dns_names: Iterable[str],
                        ip_addresses: Iterable[str], *, now: datetime | None = None,
                        renew_within: timedelta = RENEW_WITHIN, ca_days: int = CA_DAYS,
                        serving_days: int = SERVING_DAYS,
                        labels: Mapping[str, str] | None = None) -> None:
    """Make `cert_dir` hold the serving pair kept in Secret `namespace/name`.

    Creates the Secret when absent, rotates what is due (see `needs_rotation`),
    and writes `ca.crt`, `tls.crt`, `tls.key` into `cert_dir`, each atomically
    and only when its bytes changed. Races with other replicas resolve through
    AlreadyExists and resourceVersion conflicts: the loser re-reads and serves
    the winner's certificate. API errors other than those propagate.
    """
    dns, ips = list(dns_names), list(ip_addresses)
    if not dns and not ips:
        raise ValueError("need at least one DNS name or IP address to serve on")
    path = SECRETS.path(namespace, name)
    where = f"Secret {namespace}/{name}"
    for _ in range(MAX_ATTEMPTS):
        moment = now or datetime.now(UTC)
        try:
            secret = rest.get(path)
        except ApiError as exc:
            if not exc.is_not_found:
                raise
            secret = None

        if secret is None:
            material = issue_material(dns, ips, ca_days=ca_days, serving_days=serving_days)
            try:
                rest.create(SECRETS.path(namespace),
                            _secret_body(namespace, name, material, labels))
            except ApiError as exc:
                if exc.is_already_exists:
                    log.info("%s was created by another replica; using theirs", where)
                    continue
                raise
            log.info("created %s with a new CA and a serving certificate for %s",
                     where, ", ".join(dns + ips))
            write_cert_files(cert_dir, material)
            return

        serve, write, reason = _plan(_decode(secret), dns, ips, moment, renew_within,
                                     ca_days, serving_days)
        if write is None:
            assert serve is not None
            write_cert_files(cert_dir, serve)
            return
        try:
            rest.replace(path, _updated(secret, write))
        except ApiError as exc:
            if exc.is_conflict or exc.is_not_found:
                log.info("%s changed while rotating (%s); re-reading", where, exc.reason)
                continue
            raise
        log.info("rotated %s: %s", where, reason)
        write_cert_files(cert_dir, write)
        return
    raise RuntimeError(f"{where}: gave up after {MAX_ATTEMPTS} attempts lost to other writers")


# -- files ---------------------------------------------------------------------------


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


# -- keeping it fresh ------------------------------------------------------------------


def keep_secret_certs(rest: SecretApi, namespace: str, name: str,
                      cert_dir: str | os.PathLike[str], dns_names: Iterable[str],
                      ip_addresses: Iterable[str], stop: threading.Event, *,
                      interval_seconds: float = 3600.0, **options: Any) -> None:
    """Run `ensure_secret_certs` every `interval_seconds` (±10%) until `stop`.

    Picks up another replica's rotation and rotates when due; errors are
    logged and retried at the next tick, since the files already on disk
    keep serving meanwhile.
    """
    dns, ips = list(dns_names), list(ip_addresses)
    while not stop.wait(interval_seconds * random.uniform(0.9, 1.1)):
        try:
            ensure_secret_certs(rest, namespace, name, cert_dir, dns, ips, **options)
        except Exception as exc:
            log.warning("refreshing serving certificate from Secret %s/%s failed: %s",
                        namespace, name, exc)
