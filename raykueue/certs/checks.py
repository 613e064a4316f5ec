"""What a certificate says: whether a serving certificate or a CA must be
reissued, and whether a certificate, key and bundle belong together. Pure
checks, no I/O; certs/rotation.py plans what to do about their answers.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization

from raykueue.certs.issue import key_from_pem
from raykueue.core.clock import format_time

RENEW_WITHIN = timedelta(days=30)
# How needs_rotation's reason starts when only SANs are missing (the plan keeps the CA then).
LACKS_SANS = "serving certificate lacks SAN(s) "


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
        return f"serving certificate is not valid before {format_time(cert.not_valid_before_utc)}"
    expires = cert.not_valid_after_utc
    if expires - now < renew_within:
        return f"serving certificate expires {format_time(expires)} (within {renew_within.days} days)"
    missing = missing_sans(cert, dns_names, ip_addresses)
    if missing:
        return LACKS_SANS + ", ".join(missing)
    if ca_pem is not None and not issued_by(cert_pem, ca_pem):
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
    if public_der(ca.public_key()) != public_der(key.public_key()):
        return "CA key does not match the CA certificate"
    if ca.not_valid_after_utc - now < renew_within:
        return f"CA expires {format_time(ca.not_valid_after_utc)} (within {renew_within.days} days)"
    return None


def issued_by(cert_pem: bytes, ca_pem: bytes) -> bool:
    """Whether the first certificate of `cert_pem` is signed by the first of `ca_pem`."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca_pem))
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def pair_matches(cert_pem: bytes, key_pem: bytes) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return False
    return public_der(cert.public_key()) == public_der(key.public_key())


def bundle_contains(bundle_pem: bytes, ca_pem: bytes) -> bool:
    """Whether the first certificate of `ca_pem` is one of `bundle_pem`'s."""
    wanted = load_bundle(ca_pem)
    if not wanted:
        return False
    target = der(wanted[0])
    return any(der(c) == target for c in load_bundle(bundle_pem))


def load_bundle(pem: bytes) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError:
        return []


def missing_sans(cert: x509.Certificate, dns_names: Iterable[str],
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


def public_der(public_key: Any) -> bytes:
    return public_key.public_bytes(serialization.Encoding.DER,
                                   serialization.PublicFormat.SubjectPublicKeyInfo)


def der(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.DER)
