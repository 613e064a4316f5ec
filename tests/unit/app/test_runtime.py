"""app.runtime.start: one frozen record of what was built; a configured cluster is never dropped."""

from __future__ import annotations

import dataclasses
import http.server
import socket
import threading
import time
from pathlib import Path

import anyio
import httpx
import orjson
import pytest
import yaml

from raykueue.app.runtime import start
from raykueue.app.settings import Settings
from raykueue.certs.issue import cert_from_pem
from raykueue.core import contract as c
from raykueue.kube.client import ClusterConfigError
from testkit import reviews as rv


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
            # A namesake in a user's namespace is somebody else.
            assert not await lifted_by("system:serviceaccount:team-a:raykueue")
    finally:
        running.shutdown()


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]}))
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Version(http.server.BaseHTTPRequestHandler):
    """An API server that answers /version and nothing else (404)."""

    def do_GET(self) -> None:
        body = b'{"major":"1","minor":"36"}' if self.path == "/version" else b"{}"
        self.send_response(200 if self.path == "/version" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_configured_cluster_that_does_not_answer_is_retried_never_admission_only(
        tmp_path: Path, anyio_backend: str) -> None:
    """Issue 21: a replica that started while the API server did not answer probed
    /version once and ran admission-only for life, Ready, letting pods of opted-in
    RayClusters pass without a gate. Now it keeps trying and says why it is not ready."""
    port = _free_port()
    settings = Settings(kubeconfig=str(_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{port}")),
                        cert_dir=tmp_path / "certs", probe_timeout_seconds=0.5,
                        connect_backoff_max_seconds=0.5, controller=False)
    running = start(settings)
    server: http.server.ThreadingHTTPServer | None = None
    try:
        assert running.cluster is not None, "a configured cluster is never dropped"
        transport = httpx.ASGITransport(app=running.app)
        async with httpx.AsyncClient(transport=transport, base_url="https://raykueue.test") as client:
            readyz = await client.get("/readyz")
            assert readyz.status_code == 503
            detail = readyz.json()["checks"]["cluster"]["detail"]
            assert f"127.0.0.1:{port}" in detail and "connecting" in detail
            # A pod of an opted-in cluster (stamped) is not let through ungated; one
            # that did not opt in (no stamp) is never refused for raykueue's sake.
            stamped = orjson.dumps(rv.set_label(rv.worker_review(), c.OPTED_IN_LABEL, c.OPTED_IN_VALUE))
            answer = (await client.post(c.MUTATE_PATH, content=stamped)).json()["response"]
            assert answer["allowed"] is False and "patch" not in answer
            other = orjson.dumps(rv.worker_review())
            answer = (await client.post(c.MUTATE_PATH, content=other)).json()["response"]
            assert answer["allowed"] is True and "patch" not in answer

            server = http.server.ThreadingHTTPServer(("127.0.0.1", port), _Version)
            threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()

            async def cluster_check() -> dict:
                return (await client.get("/readyz")).json()["checks"]["cluster"]

            deadline = time.monotonic() + 30
            while not (check := await cluster_check())["ok"]:
                assert time.monotonic() < deadline, f"never connected: {check}"
                await anyio.sleep(0.1)
            assert f"127.0.0.1:{port}" in check["detail"]
            # This server serves no ray.io (KubeRay's CRDs not installed yet): its
            # RayClusters are watched all the same, and until they can be read the
            # replica is not ready, rather than read no owner for good.
            caches = (await client.get("/readyz")).json()["checks"]["caches"]
            assert not caches["ok"] and "rayclusters" in caches["detail"], caches
    finally:
        running.shutdown()
        if server is not None:
            server.shutdown()
            server.server_close()
    assert not any(thread.is_alive() for thread in running.threads)


def test_no_cluster_configured_is_admission_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    running = start(Settings(cert_dir=tmp_path / "certs"))
    try:
        assert running.cluster is None and running.leadership is None
    finally:
        running.shutdown()


def test_a_cluster_configured_but_unusable_stops_the_start(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """In a pod without its service account token: say so, rather than run admission-only."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(ClusterConfigError, match="RAYKUEUE_CLUSTER=false"):
        start(Settings(cert_dir=tmp_path / "certs"))
