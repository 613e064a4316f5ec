"""certs.issue: the CA and serving certificate are what TLS clients expect."""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime, timedelta

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.verification import PolicyBuilder, Store

from raykueue.certs.issue import (
    cert_from_pem,
    cert_to_pem,
    key_from_pem,
    key_to_pem,
    new_ca,
    new_serving_cert,
    not_after,
)


@pytest.fixture(scope="module")
def chain() -> tuple[x509.Certificate, x509.Certificate]:
    ca, ca_key = new_ca("test CA", days=30)
    cert, _ = new_serving_cert(ca, ca_key, ["svc.ns.svc", "localhost"], ["127.0.0.1", "::1"], 10)
    return ca, cert


def test_ca_is_a_p256_ca_limited_to_leaf_signing(
        chain: tuple[x509.Certificate, x509.Certificate]) -> None:
    ca, _ = chain
    bc = ca.extensions.get_extension_for_class(x509.BasicConstraints)
    assert bc.critical and bc.value.ca and bc.value.path_length == 0
    ku = ca.extensions.get_extension_for_class(x509.KeyUsage).value
    assert ku.key_cert_sign and ku.crl_sign and ku.digital_signature
    pub = ca.public_key()
    assert isinstance(pub, ec.EllipticCurvePublicKey) and pub.curve.name == "secp256r1"
    assert ca.subject == ca.issuer


def test_serving_cert_is_signed_by_ca_with_sans_and_server_auth(
        chain: tuple[x509.Certificate, x509.Certificate]) -> None:
    ca, cert = chain
    cert.verify_directly_issued_by(ca)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["svc.ns.svc", "localhost"]
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    ku = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert ku.digital_signature and not ku.key_cert_sign
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_chain_passes_a_real_path_validation(
        chain: tuple[x509.Certificate, x509.Certificate]) -> None:
    ca, cert = chain
    verifier = PolicyBuilder().store(Store([ca])).build_server_verifier(
        x509.DNSName("svc.ns.svc"))
    assert verifier.verify(cert, [])[-1] == ca
    ip_verifier = PolicyBuilder().store(Store([ca])).build_server_verifier(
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    ip_verifier.verify(cert, [])


def test_serving_cert_never_outlives_its_ca() -> None:
    ca, key = new_ca("short", days=1)
    cert, _ = new_serving_cert(ca, key, ["a"], [], days=365)
    assert cert.not_valid_after_utc <= ca.not_valid_after_utc


def test_validity_is_backdated_for_clock_skew(
        chain: tuple[x509.Certificate, x509.Certificate]) -> None:
    _, cert = chain
    assert cert.not_valid_before_utc < datetime.now(UTC) - timedelta(minutes=1)


def test_needs_a_name() -> None:
    ca, key = new_ca("x", 1)
    with pytest.raises(ValueError):
        new_serving_cert(ca, key, [], [], 1)


def test_pem_round_trip_and_not_after(chain: tuple[x509.Certificate, x509.Certificate]) -> None:
    _, cert = chain
    pem = cert_to_pem(cert)
    assert pem.startswith(b"-----BEGIN CERTIFICATE-----")
    assert cert_from_pem(pem) == cert
    assert not_after(pem) == cert.not_valid_after_utc
    key = ec.generate_private_key(ec.SECP256R1())
    assert key_from_pem(key_to_pem(key)).private_numbers() == key.private_numbers()


def test_a_given_rsa_ca_can_issue() -> None:
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca, _ = new_ca("throwaway", 1)
    # An operator-supplied CA may well be RSA.
    builder = (x509.CertificateBuilder().subject_name(ca.subject).issuer_name(ca.subject)
               .public_key(rsa_key.public_key()).serial_number(1)
               .not_valid_before(ca.not_valid_before_utc).not_valid_after(ca.not_valid_after_utc)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True))
    rsa_ca = builder.sign(rsa_key, hashes.SHA256())
    cert, _ = new_serving_cert(rsa_ca, key_from_pem(key_to_pem(rsa_key)), ["a"], [], 1)
    cert.verify_directly_issued_by(rsa_ca)
