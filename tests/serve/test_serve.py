"""`raykueue serve` as a process: TLS, the generated CA, and certificate reload under load."""

from __future__ import annotations

import hashlib
import http.client
import os
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from raykueue.certs.issue import cert_to_pem, key_to_pem, new_ca, new_serving_cert
from raykueue.certs.store import write_atomic
from raykueue.core import contract as c
from testkit import reviews as rv
from testkit.waiting import holds_for, wait_for

ROOT = Path(__file__).resolve().parents[2]
UVICORN_DEFAULT_KEEP_ALIVE = 5  # seconds, uvicorn.Config(timeout_keep_alive=5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[int, Path, Path]]:
    port, cert_dir, log = free_port(), tmp_path / "certs", tmp_path / "server.log"
    env = {**os.environ, "RAYKUEUE_HOST": "127.0.0.1", "KUBECONFIG": str(tmp_path / "none")}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "raykueue.app.cli", "serve", "--port", str(port), "--cert-dir",
             str(cert_dir)], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: _healthy(port, cert_dir / "ca.crt"), timeout=30,
                 message=lambda: f"server did not start:\n{log.read_text()}")
        yield port, cert_dir, log
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _healthy(port: int, ca: Path) -> bool:
    try:
        return httpx.get(f"https://127.0.0.1:{port}/healthz", verify=_ctx(ca), timeout=1).is_success
    except (httpx.HTTPError, OSError, ssl.SSLError):
        return False


def _ctx(*cas: Path) -> ssl.SSLContext:
    context = ssl.create_default_context()
    for ca in cas:
        context.load_verify_locations(cafile=str(ca))
    return context


def _peer_fingerprint(port: int, context: ssl.SSLContext) -> str:
    with socket.create_connection(("127.0.0.1", port)) as raw, \
            context.wrap_socket(raw, server_hostname="localhost") as tls:
        return hashlib.sha256(tls.getpeercert(binary_form=True)).hexdigest()


def test_serves_tls_with_a_generated_ca_and_says_admission_only(server) -> None:
    port, cert_dir, log = server
    assert {p.name for p in cert_dir.iterdir()} >= {"ca.crt", "tls.crt", "tls.key"}
    assert oct((cert_dir / "tls.key").stat().st_mode & 0o777) == "0o600"
    ready = httpx.get(f"https://127.0.0.1:{port}/readyz", verify=_ctx(cert_dir / "ca.crt"))
    assert ready.status_code == 200
    text = log.read_text()
    assert text.count("admission-only") == 1
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)  # plain HTTP is not served


def test_certificate_reload_without_dropping_requests(server, tmp_path: Path) -> None:
    port, cert_dir, _ = server
    ca_cert, ca_key = new_ca("rotated-ca", 30)
    cert, key = new_serving_cert(ca_cert, ca_key, ["localhost"], ["127.0.0.1"], 30)
    new_ca_file = tmp_path / "new-ca.crt"
    new_ca_file.write_bytes(cert_to_pem(ca_cert))
    trust_both = _ctx(cert_dir / "ca.crt", new_ca_file)
    old_fingerprint = _peer_fingerprint(port, trust_both)

    body = rv.set_label(rv.worker_review(), c.OPTED_IN_LABEL, c.OPTED_IN_VALUE)
    body = rv.set_label(body, c.QUEUE_LABEL, "team-a")
    failures: list[str] = []
    answered = 0
    stop = threading.Event()

    def load() -> None:
        nonlocal answered
        # New connections every few requests, so handshakes happen across the swap.
        while not stop.is_set():
            with httpx.Client(verify=trust_both, timeout=5) as client:
                for _ in range(5):
                    try:
                        response = client.post(f"https://127.0.0.1:{port}{c.MUTATE_PATH}",
                                               json=body)
                        if response.status_code != 200:
                            failures.append(str(response.status_code))
                        answered += 1
                    except httpx.HTTPError as exc:
                        failures.append(repr(exc))

    worker = threading.Thread(target=load)
    worker.start()
    try:
        wait_for(lambda: answered > 20, timeout=10, message="load did not start")
        write_atomic(cert_dir / "tls.key", key_to_pem(key), 0o600)
        write_atomic(cert_dir / "tls.crt", cert_to_pem(cert), 0o644)
        wait_for(lambda: _peer_fingerprint(port, trust_both) != old_fingerprint, timeout=15,
                 message="new certificate was not served")
        before = answered
        wait_for(lambda: answered > before + 20, timeout=10, message="load stalled after reload")
    finally:
        stop.set()
        worker.join(timeout=30)
    new_fingerprint = hashlib.sha256(
        ssl.PEM_cert_to_DER_cert(cert_to_pem(cert).decode())
    ).hexdigest()
    assert _peer_fingerprint(port, _ctx(new_ca_file)) == new_fingerprint
    assert failures == []


def _handshakes(port: int, ca: Path) -> float:
    """raykueue_tls_handshakes_total, read over a new connection (which it counts)."""
    text = httpx.get(f"https://127.0.0.1:{port}/metrics", verify=_ctx(ca), timeout=5).text
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("raykueue_tls_handshakes_total"))


def _still_open(tls: ssl.SSLSocket) -> bool:
    """The server has not closed this idle connection (nothing to read, no EOF)."""
    tls.settimeout(0)
    try:
        return tls.recv(1) != b""
    except ssl.SSLWantReadError:
        return True
    except OSError:  # ssl.SSLError included: an abrupt close
        return False
    finally:
        tls.settimeout(5)


def _review(conn: http.client.HTTPSConnection, body: dict) -> None:
    conn.request("POST", c.MUTATE_PATH, orjson.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200 and orjson.loads(response.read())["response"]["allowed"]


def test_an_idle_connection_is_kept_past_uvicorns_old_default_and_reused(server) -> None:
    # The API server reuses an idle webhook connection for 90 s; uvicorn on its own
    # closes one after 5 s, so the first review after a pause paid a new handshake.
    port, cert_dir, _ = server
    ca = cert_dir / "ca.crt"
    body = rv.set_label(rv.set_label(rv.worker_review(), c.OPTED_IN_LABEL, c.OPTED_IN_VALUE),
                        c.QUEUE_LABEL, "team-a")
    before = _handshakes(port, ca)
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=_ctx(ca), timeout=5)
    try:
        _review(conn, body)
        tls = conn.sock
        assert holds_for(lambda: _still_open(tls), seconds=UVICORN_DEFAULT_KEEP_ALIVE + 1), \
            "the server closed an idle connection the API server would still reuse"
        _review(conn, body)
        assert conn.sock is tls  # not silently reconnected
    finally:
        conn.close()
    # One handshake for both reviews; the other is the second /metrics read.
    assert _handshakes(port, ca) - before == 2
