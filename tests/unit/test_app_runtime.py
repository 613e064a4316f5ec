"""app.runtime.start: one frozen record of what was built, offline (no cluster) here."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import httpx
import orjson
import pytest

from raykueue.app.runtime import start
from raykueue.app.settings import Settings
from raykueue.certs.issue import cert_from_pem
from raykueue.core import contract as c
from tests import reviews as rv


def test_offline_start_serves_the_cert_dir_and_stops_cleanly(tmp_path: Path) -> None:
    running = start(Settings(cluster=False, cert_dir=tmp_path / "certs"))
    try:
        assert running.cluster is None and running.leadership is None
        certs = running.certificates
        assert certs.keeper is None and certs.reloader is not None
        assert certs.ca_file == tmp_path / "certs" / "ca.crt" and certs.ca_file.exists()
        ok, detail = certs.ready()
        assert ok and detail.startswith("serving certificate valid until")
        served = cert_from_pem((tmp_path / "certs" / "tls.crt").read_bytes())
        assert certs.serving.not_after == served.not_valid_after_utc
        with pytest.raises(dataclasses.FrozenInstanceError):
            running.cluster = None  # type: ignore[misc]
    finally:
        running.shutdown()
    assert running.stop.is_set()
    assert not any(thread.is_alive() for thread in running.threads)


def _lift_gate_review(username: str) -> bytes:
    old = rv.pod_of(rv.worker_review())
    old = {**old, "spec": {**old["spec"], "schedulingGates": [{"name": c.GATE}]}}
    new = {**old, "spec": {**old["spec"], "schedulingGates": []}}
    return orjson.dumps(rv.update_review(old, new, username))


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_gate_lifter_is_the_pods_own_service_account(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, anyio_backend: str) -> None:
    """Installed in ray-ops (Helm's release namespace, a kustomize namespace): the
    manifests hand the pod's namespace and ServiceAccount down, and the server lets
    exactly that account lift the gate. Before, it let raykueue-system's only, so
    every opted-in pod stayed gated (issue 21)."""
    monkeypatch.setenv("RAYKUEUE_POD_NAMESPACE", "ray-ops")
    monkeypatch.setenv("RAYKUEUE_SERVICE_ACCOUNT", "raykueue")
    running = start(Settings(cluster=False, cert_dir=tmp_path / "certs"))
    try:
        transport = httpx.ASGITransport(app=running.app)
        async with httpx.AsyncClient(transport=transport, base_url="https://raykueue.test") as client:
            async def lifted_by(user: str) -> bool:
                answer = await client.post(c.VALIDATE_PATH, content=_lift_gate_review(user))
                return answer.json()["response"]["allowed"]

            assert await lifted_by("system:serviceaccount:ray-ops:raykueue")
            assert not await lifted_by(c.DEFAULT_CONTROLLER_IDENTITY)
            assert not await lifted_by("system:serviceaccount:ray-ops:default")
    finally:
        running.shutdown()
