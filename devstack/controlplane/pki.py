"""Certificates for the local control plane: one CA, a serving cert, client certs.

Everything is ECDSA P-256 and valid for a year; the stack lives for minutes.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=365)


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


def _write(path: Path, data: bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _key_pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _load_key(path: Path):
    return serialization.load_pem_private_key(path.read_bytes(), password=None)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)


def ensure_ca(directory: Path, name: str = "ca", common_name: str = "raykueue-devstack-ca") -> Pair:
    pair = Pair(directory / f"{name}.crt", directory / f"{name}.key")
    if pair.cert.exists() and pair.key.exists():
        return pair
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now())
        .not_valid_after(_now() + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write(pair.key, _key_pem(key), 0o600)
    _write(pair.cert, cert.public_bytes(serialization.Encoding.PEM))
    return pair


def issue(
    ca: Pair,
    out: Pair,
    *,
    common_name: str,
    organizations: tuple[str, ...] = (),
    dns_names: tuple[str, ...] = (),
    ip_addresses: tuple[str, ...] = (),
    server: bool = False,
    client: bool = False,
) -> Pair:
    """Issue a leaf certificate signed by `ca` unless `out` already exists."""
    if out.cert.exists() and out.key.exists():
        return out
    ca_key = _load_key(ca.key)
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    usages = []
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attrs))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now())
        .not_valid_after(_now() + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=True,
                data_encipherment=False, key_agreement=False, key_cert_sign=False,
                crl_sign=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ip_addresses]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    _write(out.key, _key_pem(key), 0o600)
    _write(out.cert, cert.public_bytes(serialization.Encoding.PEM))
    return out


def ensure_rsa_key(private: Path, public: Path) -> None:
    """The service-account signing key pair (RSA: what every verifier accepts)."""
    if private.exists() and public.exists():
        return
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write(private, _key_pem(key), 0o600)
    _write(
        public,
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )


def self_signed(out: Pair, common_name: str, dns_names=("localhost",), ips=("127.0.0.1",)) -> Pair:
    """A throwaway pair that nobody verifies (Kueue's metrics and webhook servers)."""
    if out.cert.exists() and out.key.exists():
        return out
    ca = ensure_ca(out.cert.parent, name=out.cert.stem + "-ca", common_name=common_name + "-ca")
    return issue(ca, out, common_name=common_name, dns_names=tuple(dns_names),
                 ip_addresses=tuple(ips), server=True)


def ensure_stack_pki(d: Path, admin: Pair) -> None:
    """The stack's CA, the API server's serving pair, the admin client pair and the
    service-account signing key; each made once, kept while its files exist."""
    ca = ensure_ca(d)
    issue(ca, Pair(d / "apiserver.crt", d / "apiserver.key"),
          common_name="kube-apiserver",
          dns_names=("localhost", "kubernetes", "kubernetes.default",
                     "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"),
          ip_addresses=("127.0.0.1", "10.96.0.1"), server=True)
    issue(ca, admin, common_name="raykueue-admin", organizations=("system:masters",), client=True)
    ensure_rsa_key(d / "sa.key", d / "sa.pub")
