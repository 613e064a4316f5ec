"""certs.keeper: who writes, what is served, and when a staged CA may be used."""

from __future__ import annotations

import base64
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

from raykueue.certs import checks
from raykueue.certs import rotation as r
from raykueue.certs.keeper import SecretCertKeeper, placeholder_pair
from raykueue.certs.serving import ServingContext
from raykueue.kube.rest import ApiError
from testkit.unit.certs_secret import NAME, NS, PATH, FakeSecrets, ensure
from testkit.waiting import wait_for

MUTATING = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/m"
VALIDATING = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/v"


class FakeApi(FakeSecrets):
    """Secrets plus two webhook configurations."""

    def __init__(self) -> None:
        super().__init__()
        for path in (MUTATING, VALIDATING):
            self.objects[path] = {"metadata": {"name": path.rsplit("/", 1)[1]}, "webhooks": [
                {"name": "h.example.io", "clientConfig": {"url": "https://x"}}]}

    def bundle(self, path: str) -> bytes:
        return base64.b64decode(self.objects[path]["webhooks"][0]["clientConfig"]["caBundle"])

    def reset(self, path: str) -> None:
        self.objects[path]["webhooks"][0]["clientConfig"]["caBundle"] = "Cg=="


class Clock:
    """Wall time `t` seconds after the test started (the settle time is kept in the Secret)."""

    def __init__(self) -> None:
        self.t = 0.0
        self.start = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.start + timedelta(seconds=self.t)


class Served:
    """What the keeper handed to the server, as a cert dir would have held it."""

    def __init__(self) -> None:
        self.materials: list[r.Material] = []

    def __call__(self, material: r.Material) -> None:
        self.materials.append(material)

    def tls_crt(self) -> bytes | None:
        return self.materials[-1].tls_cert if self.materials else None


def keeper(api: FakeApi, served: Served, *, leader: bool,
           clock: Clock | None = None) -> SecretCertKeeper:
    return SecretCertKeeper(
        api, NS, NAME, ["svc.example"], ["127.0.0.1"], is_leader=lambda: leader,
        mutating_config="m", validating_config="v", on_material=served,
        settle_seconds=5.0, clock=clock or Clock())


def test_non_leader_waits_for_the_secret_and_never_writes(tmp_path: Path) -> None:
    api = FakeApi()
    served = Served()
    k = keeper(api, served, leader=False)
    k.tick()
    assert not k.synced and served.tls_crt() is None
    assert api.writes() == []

    ensure(api, tmp_path / "leader", serving_days=10)  # created elsewhere, and due
    api.objects[PATH]["metadata"]["annotations"] = {r.ROTATE_ANNOTATION: r.ROTATE_CA}
    version = api.objects[PATH]["metadata"]["resourceVersion"]
    for _ in range(3):
        k.tick()
    assert k.synced and len(served.materials) == 1
    assert served.tls_crt() == api.stored()["tls.crt"]
    assert api.writes() == ["create"]
    assert api.objects[PATH]["metadata"]["resourceVersion"] == version
    assert "caBundle" not in str(api.objects[MUTATING])  # nor injects


def test_leader_creates_injects_and_repairs(tmp_path: Path) -> None:
    api = FakeApi()
    k = keeper(api, Served(), leader=True)
    k.tick()
    assert k.synced and api.writes() == ["create", "patch", "patch"]
    ca = api.stored()["ca.crt"]
    assert api.bundle(MUTATING) == ca and api.bundle(VALIDATING) == ca
    k.tick()
    assert api.writes() == ["create", "patch", "patch"]  # nothing to do
    api.reset(VALIDATING)
    k.tick()
    assert api.bundle(VALIDATING) == ca
    assert api.writes() == ["create", "patch", "patch", "patch"]


def test_leader_switches_only_after_both_configurations_trusted_for_the_settle_time(
        tmp_path: Path) -> None:
    api = FakeApi()
    clock = Clock()
    served = Served()
    k = keeper(api, served, leader=True, clock=clock)
    k.tick()
    first = api.stored()
    api.objects[PATH]["metadata"]["annotations"] = {r.ROTATE_ANNOTATION: r.ROTATE_CA}
    k.tick()  # stage 1 written and injected in the same tick
    staged = api.stored()
    assert staged["tls.crt"] == first["tls.crt"]
    assert api.bundle(MUTATING) == staged["ca.crt"] == api.bundle(VALIDATING)

    # Someone resets one configuration: trust is lost, the clock restarts.
    api.reset(MUTATING)
    clock.t = 100.0
    k.tick()  # sees it untrusted (then repairs it)
    assert api.stored()["tls.crt"] == first["tls.crt"]
    clock.t = 101.0
    k.tick()  # trusted now, since t=101
    clock.t = 105.5
    k.tick()
    assert api.stored()["tls.crt"] == first["tls.crt"]
    clock.t = 106.5
    k.tick()
    switched = api.stored()
    assert checks.issued_by(switched["tls.crt"], staged["next-ca.crt"])
    assert served.tls_crt() == switched["tls.crt"]
    assert api.bundle(MUTATING) == switched["ca.crt"]


def test_a_new_leader_carries_on_from_the_stage_in_the_secret() -> None:
    """The settle time is in the Secret: a keeper with no memory of it switches on time."""
    api = FakeApi()
    clock = Clock()
    keeper(api, Served(), leader=True, clock=clock).tick()
    api.objects[PATH]["metadata"]["annotations"] = {r.ROTATE_ANNOTATION: r.ROTATE_CA}
    first = keeper(api, Served(), leader=True, clock=clock)
    first.tick()  # staged and injected
    assert api.stored()[r.ROTATION] == b"trust"
    clock.t = 10.0
    first.tick()  # trusted: recorded in the Secret
    assert api.stored()[r.ROTATION].startswith(b"settle ")
    staged = api.stored()

    successor = keeper(api, Served(), leader=True, clock=clock)
    clock.t = 14.0
    successor.tick()
    assert api.stored()["tls.crt"] == staged["tls.crt"]  # 4s of 5: not yet
    clock.t = 15.5
    successor.tick()
    switched = api.stored()
    assert checks.issued_by(switched["tls.crt"], staged["next-ca.crt"])
    assert r.ROTATION not in switched and "next-ca.crt" not in switched


def test_loop_survives_api_errors(tmp_path: Path) -> None:
    api = FakeApi()
    api.fail_always["get"] = ApiError(0, "ConnectionRefused")
    k = keeper(api, Served(), leader=True)
    k.poll_seconds = k.leader_seconds = 0.01
    stop = threading.Event()
    thread = threading.Thread(target=k.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_for(lambda: k.last_error is not None, timeout=5, message="a failed tick")
        assert not k.synced
        api.fail_always.clear()
        wait_for(lambda: k.synced and k.last_error is None, timeout=5, message="recovery")
    finally:
        stop.set()
        k.wake()
        thread.join(5)
    assert not thread.is_alive()


def test_placeholder_is_self_signed_throwaway_and_servable() -> None:
    cert, key = placeholder_pair(["svc.example"], [])
    assert checks.pair_matches(cert, key)
    # Its CA is gone: nothing the API server trusts, nothing to inject.
    assert not checks.issued_by(cert, cert)
    serving = ServingContext.from_pem(cert, key)
    assert serving.loaded and serving.not_after is not None


def test_leadership_without_the_controller_still_tells_the_keeper(tmp_path: Path) -> None:
    from raykueue.app.leadership import ControllerHost
    from raykueue.app.settings import Settings

    host = ControllerHost(None, Settings(leader_election=False, controller=False),  # type: ignore[arg-type]
                          run_controller=False)
    elected: list[int] = []
    host.on_elected(lambda: elected.append(1))
    assert not host.is_leader()
    stop = threading.Event()
    thread = threading.Thread(target=host.run, args=(stop,), daemon=True)
    thread.start()
    try:
        # Leading starts before the hooks run: wait for the hook, not only the flag.
        wait_for(lambda: elected, timeout=5, message="the on-elected hook")
        assert elected == [1] and host.is_leader() and host.controller is None
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive() and not host.is_leader()
