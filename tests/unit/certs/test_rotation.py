"""certs.rotation: the staged plan, including the ordering invariant it exists for."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from cryptography import x509

from raykueue.certs import checks
from raykueue.certs import rotation as r
from raykueue.certs.issue import cert_to_pem

DNS = ["raykueue-webhook.raykueue-system.svc"]
IPS = ["127.0.0.1"]


def now() -> datetime:
    return datetime.now(UTC)


def stored(material: r.Material) -> dict[str, bytes]:
    return material.fields()


def cas(bundle: bytes) -> list[bytes]:
    return [cert_to_pem(c) for c in x509.load_pem_x509_certificates(bundle)]


def test_steady_state_writes_nothing() -> None:
    m = r.issue_material(DNS, IPS)
    step = r.plan(stored(m), DNS, IPS, now())
    assert step.write is None and step.pending_ca is None
    assert step.serve is not None and step.serve.tls_cert == m.tls_cert


def test_requested_ca_rotation_first_only_adds_the_new_ca() -> None:
    m = r.issue_material(DNS, IPS)
    step = r.plan(stored(m), DNS, IPS, now(), request=r.ROTATE_CA)
    w = step.write
    assert w is not None and step.clear_request
    assert (w.tls_cert, w.tls_key, w.ca_key) == (m.tls_cert, m.tls_key, m.ca_key)
    assert w.next_ca_cert is not None and w.next_ca_key is not None
    assert cas(w.ca_cert) == [m.ca_cert, w.next_ca_cert]
    assert step.pending_ca == w.next_ca_cert
    assert step.serve is not None and step.serve.tls_cert == m.tls_cert


def test_pending_rotation_waits_for_trust_then_switches() -> None:
    m = r.issue_material(DNS, IPS)
    staged = r.plan(stored(m), DNS, IPS, now(), request=r.ROTATE_CA).write
    assert staged is not None and staged.next_ca_cert is not None

    waiting = r.plan(stored(staged), DNS, IPS, now())
    assert waiting.write is None and waiting.pending_ca == staged.next_ca_cert
    assert waiting.serve is not None and waiting.serve.tls_cert == m.tls_cert

    switched = r.plan(stored(staged), DNS, IPS, now(), pending_trusted=True)
    w = switched.write
    assert w is not None and switched.pending_ca is None
    assert w.next_ca_cert is None and w.next_ca_key is None
    assert cas(w.ca_cert) == [staged.next_ca_cert, m.ca_cert]
    assert checks.issued_by(w.tls_cert, staged.next_ca_cert)
    assert w.ca_key == staged.next_ca_key
    assert r.plan(stored(w), DNS, IPS, now()).write is None


def test_expiring_ca_is_staged_like_a_request() -> None:
    m = r.issue_material(DNS, IPS, ca_days=10)
    step = r.plan(stored(m), DNS, IPS, now())
    assert step.write is not None and step.write.next_ca_cert is not None
    assert step.write.tls_cert == m.tls_cert
    assert "CA expires" in (step.reason or "")
    assert not step.clear_request


def test_expired_cas_leave_the_bundle_at_the_next_rotation() -> None:
    m = r.issue_material(DNS, IPS)
    staged = r.plan(stored(m), DNS, IPS, now(), request=r.ROTATE_CA).write
    assert staged is not None
    switched = r.plan(stored(staged), DNS, IPS, now(), pending_trusted=True).write
    assert switched is not None and len(cas(switched.ca_cert)) == 2
    # Once the old CA has expired, the next stage-1 bundle no longer carries it.
    later = now() + timedelta(days=r.CA_DAYS + 1)
    old_ca = x509.load_pem_x509_certificate(m.ca_cert)
    assert old_ca.not_valid_after_utc < later
    step = r.plan(stored(switched), DNS, IPS, later)
    assert step.write is not None
    assert m.ca_cert not in cas(step.write.ca_cert)


def test_serving_request_reissues_from_the_same_ca() -> None:
    m = r.issue_material(DNS, IPS)
    step = r.plan(stored(m), DNS, IPS, now(), request=r.ROTATE_SERVING)
    w = step.write
    assert w is not None and step.clear_request and step.pending_ca is None
    assert w.ca_cert == m.ca_cert and w.tls_cert != m.tls_cert
    assert checks.issued_by(w.tls_cert, m.ca_cert)


def test_unknown_request_is_dropped_without_rotating() -> None:
    m = r.issue_material(DNS, IPS)
    step = r.plan(stored(m), DNS, IPS, now(), request="everything")
    assert step.clear_request and step.write is not None
    assert step.write.fields() == {k: v for k, v in m.fields().items()
                                   if k != r.CA_KEY} | {r.CA_KEY: m.ca_key}
    assert "ignored" in (step.reason or "")


def test_someone_elses_secret_is_never_rotated() -> None:
    m = r.issue_material(DNS, IPS, serving_days=5)
    given = {k: v for k, v in stored(m).items() if k != r.CA_KEY}
    step = r.plan(given, DNS, IPS, now(), request=r.ROTATE_CA)
    assert step.write is None
    assert step.warning and "not rotating" in step.warning


def test_broken_pending_ca_is_restaged() -> None:
    m = r.issue_material(DNS, IPS)
    staged = r.plan(stored(m), DNS, IPS, now(), request=r.ROTATE_CA).write
    assert staged is not None
    other = r.issue_material(DNS, IPS)
    broken = replace(staged, next_ca_key=other.ca_key)  # key does not match next-ca.crt
    step = r.plan(stored(broken), DNS, IPS, now(), pending_trusted=True)
    assert step.write is not None and step.write.tls_cert == m.tls_cert
    assert step.write.next_ca_cert not in (None, staged.next_ca_cert)
    assert cas(step.write.ca_cert) == [m.ca_cert, step.write.next_ca_cert]


@pytest.mark.parametrize("first_request", [r.ROTATE_CA, None])
def test_a_served_certificate_is_always_trusted_first(first_request: str | None) -> None:
    """Drive the plan like the leader does and check the invariant at every write.

    `trusted` is what the webhook configurations hold; it catches up with the
    Secret's bundle only when the leader injects, which the loop does only
    every other round, so trust lags the way it does against a real API.
    """
    secret = stored(r.issue_material(DNS, IPS))
    trusted = secret[r.CA_CERT]
    requests = [first_request, None, r.ROTATE_CA, None, None, r.ROTATE_SERVING, None, None]
    switches = 0
    for i, request in enumerate(requests * 2):
        pending = secret.get(r.NEXT_CA_CERT)
        step = r.plan(secret, DNS, IPS, now(), request=request,
                      pending_trusted=bool(pending) and checks.bundle_contains(trusted, pending))
        if step.write is not None:
            new = step.write.fields()
            # The invariant: what is served is signed by a CA the API server trusts already.
            assert any(checks.issued_by(new[r.TLS_CERT], ca) for ca in cas(trusted)), i
            switches += new[r.TLS_CERT] != secret[r.TLS_CERT]
            secret = new
        if i % 2:
            trusted = secret[r.CA_CERT]
    assert switches >= 2


def test_settle_stage_is_recorded_kept_and_reset_in_the_secret() -> None:
    m = r.issue_material(DNS, IPS)
    staged = r.plan(stored(m), DNS, IPS, now(), request=r.ROTATE_CA).write
    assert staged is not None and staged.rotation == b"trust"
    settle = timedelta(seconds=5)
    t0 = now()

    trusted = r.plan(stored(staged), DNS, IPS, t0, pending_trusted=True, settle=settle)
    w = trusted.write
    assert w is not None and r.Stage.decode(w.rotation) == r.Stage(r.STAGE_SETTLE, t0)
    assert replace(w, rotation=staged.rotation) == staged  # only the stage changed

    early = r.plan(stored(w), DNS, IPS, t0 + timedelta(seconds=4), pending_trusted=True,
                   settle=settle)
    assert early.write is None and early.pending_ca == staged.next_ca_cert

    lost = r.plan(stored(w), DNS, IPS, t0 + timedelta(seconds=4), settle=settle).write
    assert lost is not None and lost.rotation == b"trust"  # the settle time starts over

    done = r.plan(stored(w), DNS, IPS, t0 + timedelta(seconds=6), pending_trusted=True,
                  settle=settle).write
    assert done is not None and done.rotation is None
    assert checks.issued_by(done.tls_cert, staged.next_ca_cert)


def test_an_unreadable_stage_counts_as_untrusted() -> None:
    assert r.Stage.decode(b"settle yesterday") == r.Stage(r.STAGE_TRUST)
    assert r.Stage.decode(b"settle 2026-01-01T00:00:00") == r.Stage(r.STAGE_TRUST)  # no zone
    assert r.Stage.decode(None) == r.Stage(r.STAGE_TRUST)
