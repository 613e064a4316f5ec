"""kube.client: where configuration comes from, and the /version probe."""

from __future__ import annotations

import http.server
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from raykueue.kube import client as kube_client
from raykueue.kube.client import load_api_client


class VersionHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen_auth: list[str] = []  # noqa: RUF012

    def do_GET(self) -> None:
        VersionHandler.seen_auth.append(self.headers.get("Authorization", ""))
        data = b'{"major":"1","minor":"36","gitVersion":"v1.36.0"}'
        self.send_response(200 if self.path == "/version" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api_url() -> Iterator[str]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), VersionHandler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(kube_client, "DEFAULT_KUBECONFIG", str(tmp_path / "home/.kube/config"))
    kube_client._logged.clear()


def write_kubeconfig(path: Path, server: str, token: str = "tok-123") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"""
apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{server}"}}}}]
users: [{{name: u, user: {{token: {token}}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
    return path


def test_nothing_configured_is_none(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="raykueue.kube.client"):
        assert load_api_client(None) is None
    assert "no kubernetes configuration" in caplog.text


def test_explicit_kubeconfig_probes_version(api_url: str, tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc", api_url)
    client = load_api_client(str(path))
    assert client is not None
    assert client.configuration.host == api_url
    assert VersionHandler.seen_auth[-1] == "Bearer tok-123"


def test_kubeconfig_env_then_home(api_url: str, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    env_path = write_kubeconfig(tmp_path / "env-kc", api_url)
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'missing'}:{env_path}")
    assert load_api_client(None) is not None
    monkeypatch.delenv("KUBECONFIG")
    write_kubeconfig(tmp_path / "home/.kube/config", api_url)
    assert load_api_client(None) is not None


def test_explicit_kubeconfig_wins_over_in_cluster(api_url: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    path = write_kubeconfig(tmp_path / "kc", api_url)
    client = load_api_client(str(path))
    assert client is not None and client.configuration.host == api_url


def test_kubeconfig_env_wins_over_in_cluster(api_url: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # A process inside a pod pointed elsewhere through KUBECONFIG (CI, a test
    # run) must not reach the cluster it runs in, as with client-go.
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "env-kc", api_url)))
    client = load_api_client(None)
    assert client is not None and client.configuration.host == api_url


def test_in_cluster_wins_over_home_kubeconfig(api_url: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch,
                                              caplog: pytest.LogCaptureFixture) -> None:
    write_kubeconfig(tmp_path / "home/.kube/config", api_url)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with caplog.at_level(logging.WARNING, logger="raykueue.kube.client"):
        # In-cluster is chosen (and, with no service account here, unusable):
        # ~/.kube/config is not consulted.
        assert load_api_client(None) is None
    assert "unusable" in caplog.text


def test_in_cluster_without_service_account_is_none(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with caplog.at_level(logging.WARNING, logger="raykueue.kube.client"):
        assert load_api_client(None) is None
    assert "unusable" in caplog.text


def test_unreachable_server_is_none_logged_once_without_token(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write_kubeconfig(tmp_path / "kc", "http://127.0.0.1:9", token="very-secret")
    with caplog.at_level(logging.WARNING, logger="raykueue.kube.client"):
        assert load_api_client(str(path), probe_timeout=1) is None
        assert load_api_client(str(path), probe_timeout=1) is None
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert "127.0.0.1:9" in caplog.text
    assert "very-secret" not in caplog.text


def test_missing_explicit_file_is_none(tmp_path: Path) -> None:
    assert load_api_client(str(tmp_path / "nope")) is None
