"""certs.secret: the rotation decision, and the Secret protocol against a fake.

The fake below stands in for the API server's Secret storage only as far as
this module relies on it: 404 on a missing object, AlreadyExists on a second
create, Conflict on a stale resourceVersion. The real server is exercised by
tests/api/test_certs_secret.py.
"""

from __future__ import annotations

import copy
import logging
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from raykueue.certs import secret as s
from raykueue.certs.checks import pair_matches
from raykueue.certs.issue import cert_to_pem, key_to_pem, new_ca, new_serving_cert
from raykueue.kube.rest import ApiError
from testkit.certfiles import ensure_secret_certs, write_cert_files
from testkit.unit.certs_secret import DNS, NAME, NS, PATH, FakeSecrets, ensure

COLLECTION = f"/api/v1/namespaces/{NS}/secrets"


def load(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def sans(pem: bytes) -> list[str]:
    ext = load(pem).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return ext.get_values_for_type(x509.DNSName) + [
        str(ip) for ip in ext.get_values_for_type(x509.IPAddress)]


@pytest.fixture
def fake() -> FakeSecrets:
    return FakeSecrets()


def serving(days: int = 365, dns: list[str] = DNS, ips: tuple[str, ...] = ()) -> tuple[bytes, bytes]:
    ca, ca_key = new_ca("test CA", 3650)
    cert, _ = new_serving_cert(ca, ca_key, dns, ips, days)
    return cert_to_pem(cert), cert_to_pem(ca)


NOW = datetime.now(UTC)


@pytest.fixture(autouse=True)
def _fresh_now() -> None:
    # Certificates are issued at test time, backdated a few minutes; a NOW
    # taken at collection can be older than that in a long session.
    global NOW
    NOW = datetime.now(UTC)


# -- the decision --------------------------------------------------------------------


class TestNeedsRotation:
    def test_fresh_certificate_needs_nothing(self) -> None:
        cert, ca = serving()
        assert s.needs_rotation(cert, DNS, NOW) is None
        assert s.needs_rotation(cert, DNS, NOW, ca_pem=ca) is None

    def test_expiring_within_window(self) -> None:
        cert, _ = serving(days=29)
        reason = s.needs_rotation(cert, DNS, NOW)
        assert reason is not None and "expires" in reason and "30 days" in reason

    def test_window_is_configurable(self) -> None:
        cert, _ = serving(days=29)
        assert s.needs_rotation(cert, DNS, NOW, renew_within=timedelta(days=7)) is None

    def test_later_now_makes_it_due(self) -> None:
        cert, _ = serving(days=365)
        assert s.needs_rotation(cert, DNS, NOW + timedelta(days=340)) is not None

    def test_expired(self) -> None:
        cert, _ = serving(days=1)
        assert s.needs_rotation(cert, DNS, NOW + timedelta(days=2)) is not None

    def test_not_yet_valid(self) -> None:
        cert, _ = serving()
        reason = s.needs_rotation(cert, DNS, NOW - timedelta(days=1))
        assert reason is not None and "not valid before" in reason

    def test_missing_dns_san_is_named(self) -> None:
        cert, _ = serving(dns=DNS[:1])
        reason = s.needs_rotation(cert, DNS, NOW)
        assert reason == f"serving certificate lacks SAN(s) {DNS[1]}"

    def test_dns_names_compare_case_insensitively(self) -> None:
        cert, _ = serving()
        assert s.needs_rotation(cert, [d.upper() for d in DNS], NOW) is None

    def test_subset_of_sans_is_fine(self) -> None:
        cert, _ = serving()
        assert s.needs_rotation(cert, DNS[:1], NOW) is None

    def test_missing_ip_san(self) -> None:
        cert, _ = serving(ips=("10.0.0.1",))
        assert s.needs_rotation(cert, DNS, NOW, ip_addresses=["10.0.0.1"]) is None
        reason = s.needs_rotation(cert, DNS, NOW, ip_addresses=["10.0.0.2"])
        assert reason is not None and "10.0.0.2" in reason

    def test_unreadable(self) -> None:
        assert s.needs_rotation(b"not a pem", DNS, NOW) == "serving certificate is unreadable"

    def test_issued_by_another_ca(self) -> None:
        cert, _ = serving()
        _, other_ca = serving()
        reason = s.needs_rotation(cert, DNS, NOW, ca_pem=other_ca)
        assert reason is not None and "not issued by the stored CA" in reason

    def test_ca_checks(self) -> None:
        ca, key = new_ca("c", 3650)
        _, other_key = new_ca("o", 3650)
        assert s.ca_needs_rotation(cert_to_pem(ca), key_to_pem(key), NOW) is None
        assert "does not match" in (
            s.ca_needs_rotation(cert_to_pem(ca), key_to_pem(other_key), NOW) or "")
        short, short_key = new_ca("s", 20)
        assert "CA expires" in (
            s.ca_needs_rotation(cert_to_pem(short), key_to_pem(short_key), NOW) or "")
        assert "unreadable" in (s.ca_needs_rotation(b"x", key_to_pem(key), NOW) or "")


# -- the Secret protocol ---------------------------------------------------------------


def test_creates_secret_and_writes_files(fake: FakeSecrets, tmp_path: Path) -> None:
    ensure(fake, tmp_path / "certs", ips=["127.0.0.1"])
    assert fake.writes() == ["create"]
    obj = fake.objects[PATH]
    assert obj["type"] == "kubernetes.io/tls"
    assert set(obj["data"]) == {"tls.crt", "tls.key", "ca.crt", "ca.key"}
    stored = fake.stored()
    d = tmp_path / "certs"
    assert sorted(p.name for p in d.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
    for key in ("ca.crt", "tls.crt", "tls.key"):
        assert (d / key).read_bytes() == stored[key]
    assert not (d / "ca.key").exists()
    assert (d / "tls.key").stat().st_mode & 0o777 == 0o600
    load(stored["tls.crt"]).verify_directly_issued_by(load(stored["ca.crt"]))
    assert sans(stored["tls.crt"]) == [*DNS, "127.0.0.1"]


def test_second_replica_serves_the_same_pair_without_writing(
        fake: FakeSecrets, tmp_path: Path) -> None:
    ensure(fake, tmp_path / "a")
    rv = fake.objects[PATH]["metadata"]["resourceVersion"]
    ensure(fake, tmp_path / "b")
    assert fake.writes() == ["create"]
    assert fake.objects[PATH]["metadata"]["resourceVersion"] == rv
    for key in ("ca.crt", "tls.crt", "tls.key"):
        assert (tmp_path / "a" / key).read_bytes() == (tmp_path / "b" / key).read_bytes()


def test_losing_the_create_race_adopts_the_winner(fake: FakeSecrets, tmp_path: Path) -> None:
    other = FakeSecrets()
    ensure(other, tmp_path / "winner")
    winner = other.objects[PATH]

    def another_replica_creates_first() -> None:
        fake.objects[PATH] = copy.deepcopy(winner)

    fake.before_next["create"] = another_replica_creates_first
    ensure(fake, tmp_path / "loser")
    assert fake.writes() == ["create"]
    assert fake.objects[PATH] == winner
    for key in ("ca.crt", "tls.crt", "tls.key"):
        assert (tmp_path / "loser" / key).read_bytes() == (tmp_path / "winner" / key).read_bytes()


def test_expiring_certificate_is_reissued_from_the_same_ca(
        fake: FakeSecrets, tmp_path: Path) -> None:
    ensure(fake, tmp_path / "a", serving_days=10)
    before = fake.stored()
    rv = fake.objects[PATH]["metadata"]["resourceVersion"]
    ensure(fake, tmp_path / "a")
    after = fake.stored()
    assert fake.writes() == ["create", "replace"]
    assert fake.objects[PATH]["metadata"]["resourceVersion"] != rv
    assert after["ca.crt"] == before["ca.crt"] and after["ca.key"] == before["ca.key"]
    assert after["tls.crt"] != before["tls.crt"] and after["tls.key"] != before["tls.key"]
    assert s.needs_rotation(after["tls.crt"], DNS, datetime.now(UTC)) is None
    load(after["tls.crt"]).verify_directly_issued_by(load(after["ca.crt"]))
    assert (tmp_path / "a" / "tls.crt").read_bytes() == after["tls.crt"]
    assert (tmp_path / "a" / "tls.key").read_bytes() == after["tls.key"]


def test_new_san_triggers_rotation(fake: FakeSecrets, tmp_path: Path) -> None:
    ensure(fake, tmp_path / "a", dns=DNS[:1])
    ensure(fake, tmp_path / "a", dns=DNS)
    assert fake.writes() == ["create", "replace"]
    assert sans(fake.stored()["tls.crt"]) == DNS


def test_replicas_with_different_sans_converge(fake: FakeSecrets, tmp_path: Path) -> None:
    ensure(fake, tmp_path / "old", dns=["old.example"], ips=["10.0.0.1"])
    ensure(fake, tmp_path / "new", dns=["new.example"], ips=["10.0.0.2"])
    assert sans(fake.stored()["tls.crt"]) == ["new.example", "old.example", "10.0.0.2", "10.0.0.1"]
    ensure(fake, tmp_path / "old", dns=["old.example"], ips=["10.0.0.1"])
    ensure(fake, tmp_path / "new", dns=["new.example"], ips=["10.0.0.2"])
    assert fake.writes() == ["create", "replace"]


def test_rotation_keeps_other_metadata_and_drops_managed_fields(
        fake: FakeSecrets, tmp_path: Path) -> None:
    ensure(fake, tmp_path, serving_days=10, labels={"app.kubernetes.io/name": "raykueue"})
    fake.objects[PATH]["metadata"]["annotations"] = {"keep": "me"}
    fake.objects[PATH]["metadata"]["managedFields"] = [{"manager": "x"}]
    ensure(fake, tmp_path)
    meta = fake.objects[PATH]["metadata"]
    assert meta["labels"] == {"app.kubernetes.io/name": "raykueue"}
    assert meta["annotations"] == {"keep": "me"}
    assert "managedFields" not in meta


def test_conflict_rereads_and_adopts_the_other_rotation(
        fake: FakeSecrets, tmp_path: Path) -> None:
    ensure(fake, tmp_path / "a", serving_days=10)
    theirs: dict[str, Any] = {}

    def another_replica_rotates() -> None:
        # The other replica rotates through the same fake, in between our read and write.
        ensure(fake, tmp_path / "other")
        theirs.update(fake.stored())

    fake.before_next["replace"] = another_replica_rotates
    ensure(fake, tmp_path / "a")
    # ours: create, replace(conflict); theirs (nested): replace; then we re-read and serve theirs
    assert fake.writes() == ["create", "replace", "replace"]
    assert fake.stored() == theirs
    assert (tmp_path / "a" / "tls.crt").read_bytes() == theirs["tls.crt"]


def test_secret_deleted_while_rotating_is_recreated(fake: FakeSecrets, tmp_path: Path) -> None:
    ensure(fake, tmp_path, serving_days=10)
    fake.before_next["replace"] = lambda: fake.objects.clear()
    ensure(fake, tmp_path)
    assert fake.writes() == ["create", "replace", "create"]
    assert (tmp_path / "tls.crt").read_bytes() == fake.stored()["tls.crt"]


def test_gives_up_when_always_losing(fake: FakeSecrets, tmp_path: Path) -> None:
    ensure(fake, tmp_path, serving_days=10)

    def always_conflict(path: str, body: Any) -> Any:
        raise ApiError(409, "Conflict", {"reason": "Conflict"})

    fake.replace = always_conflict  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="gave up"):
        ensure(fake, tmp_path)


def test_other_api_errors_propagate(fake: FakeSecrets, tmp_path: Path) -> None:
    fake.fail_always["get"] = ApiError(403, "Forbidden", {"reason": "Forbidden"})
    with pytest.raises(ApiError) as info:
        ensure(fake, tmp_path)
    assert info.value.status == 403
    assert not tmp_path.joinpath("tls.crt").exists()


def test_empty_secret_is_filled_in(fake: FakeSecrets, tmp_path: Path) -> None:
    fake.objects[PATH] = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                          "metadata": {"name": NAME, "namespace": NS, "resourceVersion": "7"}}
    ensure(fake, tmp_path)
    assert fake.writes() == ["replace"]
    assert set(fake.stored()) == {"tls.crt", "tls.key", "ca.crt", "ca.key"}


def test_mismatched_serving_key_is_reissued(fake: FakeSecrets, tmp_path: Path) -> None:
    ensure(fake, tmp_path)
    other = FakeSecrets()
    ensure(other, tmp_path / "other")
    fake.objects[PATH]["data"]["tls.key"] = other.objects[PATH]["data"]["tls.key"]
    ensure(fake, tmp_path)
    assert fake.writes() == ["create", "replace"]
    stored = fake.stored()
    assert pair_matches(stored["tls.crt"], stored["tls.key"])


def test_secret_without_ca_key_is_served_as_given(
        fake: FakeSecrets, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ensure(fake, tmp_path / "seed", serving_days=10)  # expiring, so a rotation would be due
    del fake.objects[PATH]["data"]["ca.key"]
    given = fake.stored()
    with caplog.at_level(logging.WARNING, logger="raykueue.certs.secret"):
        ensure(fake, tmp_path / "a")
    assert fake.writes() == ["create"]
    assert fake.stored() == given
    assert (tmp_path / "a" / "tls.crt").read_bytes() == given["tls.crt"]
    assert "not rotating" in caplog.text


def test_secret_without_ca_leaves_no_stale_ca_file(fake: FakeSecrets, tmp_path: Path) -> None:
    ensure(fake, tmp_path)
    del fake.objects[PATH]["data"]["ca.key"]
    del fake.objects[PATH]["data"]["ca.crt"]
    ensure(fake, tmp_path)
    assert not (tmp_path / "ca.crt").exists()
    assert (tmp_path / "tls.crt").exists()


def test_expiring_ca_is_rotated_in_two_stages(fake: FakeSecrets, tmp_path: Path) -> None:
    ensure(fake, tmp_path, ca_days=20)
    old = fake.stored()
    ensure(fake, tmp_path)
    staged = fake.stored()
    assert fake.writes() == ["create", "replace"]
    # Stage 1: the new CA joins the bundle; the served pair and the signing CA stay.
    assert staged["tls.crt"] == old["tls.crt"] and staged["ca.key"] == old["ca.key"]
    bundle = x509.load_pem_x509_certificates(staged["ca.crt"])
    assert [cert_to_pem(c) for c in bundle] == [old["ca.crt"], staged["next-ca.crt"]]
    assert (tmp_path / "tls.crt").read_bytes() == old["tls.crt"]
    assert (tmp_path / "ca.crt").read_bytes() == staged["ca.crt"]
    # Untrusted: nothing moves, however often it runs.
    ensure(fake, tmp_path)
    assert fake.writes() == ["create", "replace"]

    asked: list[bytes] = []
    ensure(fake, tmp_path, pending_trusted=lambda pem: asked.append(pem) or True)
    assert asked == [staged["next-ca.crt"]]
    new = fake.stored()
    assert fake.writes() == ["create", "replace", "replace"]
    assert "next-ca.crt" not in new and "next-ca.key" not in new
    bundle = x509.load_pem_x509_certificates(new["ca.crt"])
    assert [cert_to_pem(c) for c in bundle] == [staged["next-ca.crt"], old["ca.crt"]]
    load(new["tls.crt"]).verify_directly_issued_by(bundle[0])
    assert new["ca.key"] == staged["next-ca.key"]
    assert (tmp_path / "tls.crt").read_bytes() == new["tls.crt"]
    # Stable afterwards.
    ensure(fake, tmp_path, pending_trusted=lambda pem: True)
    assert fake.writes() == ["create", "replace", "replace"]


def test_rotate_request_is_honoured_and_cleared(fake: FakeSecrets, tmp_path: Path) -> None:
    ensure(fake, tmp_path)
    before = fake.stored()
    fake.objects[PATH]["metadata"]["annotations"] = {"raykueue.io/rotate": "ca",
                                                     "keep": "me"}
    ensure(fake, tmp_path)
    assert fake.objects[PATH]["metadata"]["annotations"] == {"keep": "me"}
    staged = fake.stored()
    assert staged["tls.crt"] == before["tls.crt"] and "next-ca.crt" in staged

    # A request during a pending rotation waits for it and is cleared by the switch.
    fake.objects[PATH]["metadata"]["annotations"]["raykueue.io/rotate"] = "serving"
    ensure(fake, tmp_path, pending_trusted=lambda pem: True)
    after = fake.stored()
    assert fake.objects[PATH]["metadata"]["annotations"] == {"keep": "me"}
    load(after["tls.crt"]).verify_directly_issued_by(load(staged["next-ca.crt"]))

    fake.objects[PATH]["metadata"]["annotations"]["raykueue.io/rotate"] = "serving"
    ensure(fake, tmp_path)
    renewed = fake.stored()
    assert fake.objects[PATH]["metadata"]["annotations"] == {"keep": "me"}
    assert renewed["tls.crt"] != after["tls.crt"] and renewed["ca.crt"] == after["ca.crt"]
    load(renewed["tls.crt"]).verify_directly_issued_by(load(staged["next-ca.crt"]))


def test_reading_never_writes(fake: FakeSecrets, tmp_path: Path) -> None:
    assert s.read_secret_material(fake, NS, NAME) is None
    ensure(fake, tmp_path / "leader", serving_days=10)  # due for renewal
    fake.objects[PATH]["metadata"]["annotations"] = {"raykueue.io/rotate": "ca"}
    material = s.read_secret_material(fake, NS, NAME)
    assert material is not None and material.tls_cert == fake.stored()["tls.crt"]
    assert fake.writes() == ["create"]


def test_needs_a_name_to_serve(fake: FakeSecrets, tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        ensure_secret_certs(fake, NS, NAME, tmp_path, [], [])
    assert fake.calls == []


def test_unchanged_files_are_not_rewritten(fake: FakeSecrets, tmp_path: Path) -> None:
    ensure(fake, tmp_path)
    inodes = {p.name: p.stat().st_ino for p in tmp_path.iterdir()}
    ensure(fake, tmp_path)
    assert {p.name: p.stat().st_ino for p in tmp_path.iterdir()} == inodes
    stored = fake.stored()
    material = s.Material(stored["ca.crt"], stored["tls.crt"], stored["tls.key"])
    assert write_cert_files(tmp_path, material) is False
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]  # no temp files left


def test_no_key_material_in_logs(fake: FakeSecrets, tmp_path: Path,
                                 caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        ensure(fake, tmp_path, serving_days=10)
        ensure(fake, tmp_path)
    stored = fake.stored()
    text = caplog.text
    assert "created Secret" in text and "rotated Secret" in text
    assert "PRIVATE KEY" not in text
    for key in ("tls.key", "ca.key"):
        assert stored[key].decode() not in text
        assert fake.objects[PATH]["data"][key] not in text


def test_describe_shows_the_stage_without_key_material(fake: FakeSecrets, tmp_path: Path) -> None:
    ensure(fake, tmp_path)
    fake.objects[PATH]["metadata"]["annotations"] = {"raykueue.io/rotate": "ca"}
    lines = s.describe(fake.objects[PATH])
    assert lines[0].startswith("ca.crt[0]:") and lines[0].endswith("signs the serving certificate")
    assert any("raykueue.io/rotate=ca" in line for line in lines)
    ensure(fake, tmp_path)
    lines = s.describe(fake.objects[PATH])
    assert lines[1].startswith("ca.crt[1]:") and lines[1].endswith("trusted")
    assert any(line.startswith("rotation: new CA staged") for line in lines)
    assert not any("raykueue.io/rotate" in line for line in lines)
    assert "PRIVATE" not in "\n".join(lines)
