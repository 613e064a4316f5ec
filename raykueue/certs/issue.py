"""Issue a private CA and serving certificates signed by it.

ECDSA P-256 throughout: small keys, fast handshakes, and accepted by every
Kubernetes API server as a webhook CA.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PrivateKey = ec.EllipticCurvePrivateKey
# A CA handed to us may hold any key type that can sign.
IssuerKey = CertificateIssuerPrivateKeyTypes

# Backdating covers small clock differences between us and the API server
# that will verify the chain.
_BACKDATE = timedelta(minutes=5)


def new_key() -> PrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def new_ca(common_name: str, days: int) -> tuple[x509.Certificate, PrivateKey]:
    key = new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.now(UTC)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(ski, critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def new_serving_cert(ca_cert: x509.Certificate, ca_key: IssuerKey,
                     dns_names: Iterable[str], ip_addresses: Iterable[str],
                     days: int) -> tuple[x509.Certificate, PrivateKey]:
    dns = list(dns_names)
    ips = [ipaddress.ip_address(ip) for ip in ip_addresses]
    if not dns and not ips:
        raise ValueError("a serving certificate needs at least one DNS name or IP")
    key = new_key()
    # Clients match SANs only; the CN is for humans reading the certificate.
    common_name = dns[0] if dns else str(ips[0])
    now = datetime.now(UTC)
    not_after = min(now + timedelta(days=days), ca_cert.not_valid_after_utc)
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    sans += [x509.IPAddress(ip) for ip in ips]
    try:
        ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    except x509.ExtensionNotFound:
        ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_cert.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
            critical=False)
        .sign(ca_key, _digest_for(ca_key))
    )
    return cert, key


def _digest_for(key: IssuerKey) -> hashes.SHA256 | None:
    # EdDSA hashes internally and refuses a separate digest.
    if isinstance(key, ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey):
        return None
    return hashes.SHA256()


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    # ECDSA signs the handshake, so digitalSignature; keyEncipherment is an
    # RSA-only usage and is left off.
    return x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=cert_sign,
        crl_sign=cert_sign, encipher_only=False, decipher_only=False)


# -- PEM ------------------------------------------------------------------------

def cert_to_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def key_to_pem(key: IssuerKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM,
                             serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def cert_from_pem(data: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(data)


def key_from_pem(data: bytes) -> IssuerKey:
    key = serialization.load_pem_private_key(data, password=None)
    if not isinstance(key, IssuerKey):
        raise ValueError(f"{type(key).__name__} cannot sign certificates")
    return key


def not_after(cert_pem: bytes) -> datetime:
    """Expiry (UTC) of the first certificate in `cert_pem`."""
    return cert_from_pem(cert_pem).not_valid_after_utc
