"""certs.store: files on disk, and hot reload seen by real TLS handshakes."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import stat
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509

from raykueue.certs.issue import (
    cert_from_pem,
    cert_to_pem,
    key_from_pem,
    key_to_pem,
    new_ca,
    new_serving_cert,
)
from raykueue.certs.store import CertPaths, CertReloader, ensure_certs, make_server_ssl_context, write_atomic


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- ensure_certs ------------------------------------------------------------------

def test_generates_ca_and_serving_pair_with_private_keys(tmp_path: Path) -> None:
    paths = ensure_certs(tmp_path / "certs", ["svc.ns.svc"], ["127.0.0.1"])
    root = tmp_path / "certs"
    assert paths.generated and paths.ca_cert == root / "ca.crt"
    assert mode(root) == 0o700
    assert mode(root / "ca.key") == mode(root / "tls.key") == 0o600
    ca = cert_from_pem((root / "ca.crt").read_bytes())
    leaf = cert_from_pem((root / "tls.crt").read_bytes())
    leaf.verify_directly_issued_by(ca)
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["svc.ns.svc"]
    assert not [p for p in root.iterdir() if p.name.startswith(".")]  # no temp leftovers


def test_idempotent(tmp_path: Path) -> None:
    first = ensure_certs(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    second = ensure_certs(tmp_path)
    assert not second.generated
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    assert (second.tls_cert, second.ca_cert) == (first.tls_cert, first.ca_cert)


def test_given_serving_files_are_used_as_is(tmp_path: Path) -> None:
    source = ensure_certs(tmp_path / "src")
    given = tmp_path / "given"
    given.mkdir()
    for name in ("tls.crt", "tls.key"):
        (given / name).write_bytes((tmp_path / "src" / name).read_bytes())
    paths = ensure_certs(given, ["other.name"], [])
    assert not paths.generated and paths.ca_cert is None
    assert sorted(p.name for p in given.iterdir()) == ["tls.crt", "tls.key"]
    assert paths.tls_cert.read_bytes() == source.tls_cert.read_bytes()


def test_existing_ca_is_reused_for_a_missing_serving_pair(tmp_path: Path) -> None:
    ensure_certs(tmp_path)
    ca_before = (tmp_path / "ca.crt").read_bytes()
    (tmp_path / "tls.crt").unlink()
    paths = ensure_certs(tmp_path)
    assert paths.generated
    assert (tmp_path / "ca.crt").read_bytes() == ca_before
    cert_from_pem(paths.tls_cert.read_bytes()).verify_directly_issued_by(cert_from_pem(ca_before))


def test_renew_within_reissues_only_our_own_expiring_cert(tmp_path: Path) -> None:
    ensure_certs(tmp_path, serving_days=10)
    old = (tmp_path / "tls.crt").read_bytes()
    assert not ensure_certs(tmp_path, renew_within=timedelta(days=5)).generated
    assert ensure_certs(tmp_path, renew_within=timedelta(days=30)).generated
    assert (tmp_path / "tls.crt").read_bytes() != old
    (tmp_path / "ca.key").unlink()  # not ours to rotate any more
    assert not ensure_certs(tmp_path, renew_within=timedelta(days=3650)).generated


# -- a real TLS server -----------------------------------------------------------------

class TlsServer:
    """Accepts TLS on loopback and echoes lines, one thread per connection."""

    def __init__(self, ctx: ssl.SSLContext) -> None:
        self.ctx = ctx
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.alive = True
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while self.alive:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            with self.ctx.wrap_socket(conn, server_side=True) as tls:
                while data := tls.recv(1024):
                    tls.sendall(data)
        except (OSError, ssl.SSLError):
            pass

    def close(self) -> None:
        self.alive = False
        self.sock.close()


class Pki:
    def __init__(self, root: Path) -> None:
        self.paths: CertPaths = ensure_certs(root)
        self.root = root
        self.ca = cert_from_pem((root / "ca.crt").read_bytes())
        self.ca_key = key_from_pem((root / "ca.key").read_bytes())

    def issue(self) -> tuple[bytes, bytes]:
        cert, key = new_serving_cert(self.ca, self.ca_key, ["localhost"], ["127.0.0.1"], 5)
        return cert_to_pem(cert), key_to_pem(key)

    def client(self, port: int) -> ssl.SSLSocket:
        ctx = ssl.create_default_context(cafile=str(self.root / "ca.crt"))
        raw = socket.create_connection(("127.0.0.1", port), timeout=5)
        return ctx.wrap_socket(raw, server_hostname="localhost")


def serial(tls: ssl.SSLSocket) -> int:
    der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def bump(path: Path, data: bytes) -> None:
    """Write like a careless tool: in place, not atomically."""
    path.write_bytes(data)
    st = path.stat()
    # Guarantee a visible change even on coarse-mtime filesystems.
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


@pytest.fixture
def served(pki: Pki) -> Iterator[tuple[TlsServer, CertReloader]]:
    ctx = make_server_ssl_context(pki.paths)
    reloader = CertReloader(ctx, pki.paths.tls_cert, pki.paths.tls_key, poll_seconds=0.05)
    server = TlsServer(ctx)
    yield server, reloader
    reloader.stop()
    server.close()


def test_context_is_tls12_plus(pki: Pki) -> None:
    ctx = make_server_ssl_context(pki.paths)
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2


def test_reload_swaps_cert_for_new_handshakes_only(
        pki: Pki, served: tuple[TlsServer, CertReloader]) -> None:
    server, reloader = served
    expiries: list[datetime] = []
    reloader.on_reload(expiries.append)
    assert reloader.loaded and len(expiries) == 1  # told the current expiry at once

    old_conn = pki.client(server.port)
    old_serial = serial(old_conn)
    cert_pem, key_pem = pki.issue()
    bump(pki.paths.tls_key, key_pem)
    bump(pki.paths.tls_cert, cert_pem)
    assert reloader.check()

    new_conn = pki.client(server.port)
    assert serial(new_conn) == cert_from_pem(cert_pem).serial_number != old_serial
    # The open connection carries on with the certificate it began with.
    old_conn.sendall(b"ping")
    assert old_conn.recv(4) == b"ping"
    assert serial(old_conn) == old_serial
    assert reloader.not_after == cert_from_pem(cert_pem).not_valid_after_utc
    assert expiries[-1] == reloader.not_after and len(expiries) == 2
    old_conn.close()
    new_conn.close()


def test_polling_thread_picks_up_changes(pki: Pki,
                                         served: tuple[TlsServer, CertReloader]) -> None:
    server, reloader = served
    loaded = threading.Event()
    reloader.on_reload(lambda _: loaded.set())
    loaded.clear()
    reloader.start()
    cert_pem, key_pem = pki.issue()
    bump(pki.paths.tls_key, key_pem)
    bump(pki.paths.tls_cert, cert_pem)
    assert loaded.wait(3)
    with pki.client(server.port) as conn:
        assert serial(conn) == cert_from_pem(cert_pem).serial_number


def test_half_written_pair_is_ignored_until_valid(
        pki: Pki, served: tuple[TlsServer, CertReloader],
        caplog: pytest.LogCaptureFixture) -> None:
    server, reloader = served
    with pki.client(server.port) as conn:
        original = serial(conn)
    cert_pem, key_pem = pki.issue()

    with caplog.at_level(logging.WARNING, logger="raykueue.certs.store"):
        bump(pki.paths.tls_cert, cert_pem[: len(cert_pem) // 2])  # truncated certificate
        assert not reloader.check()
        assert not reloader.check()  # same broken state: no second warning
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
    assert reloader.loaded and reloader.last_error

    bump(pki.paths.tls_cert, cert_pem)  # whole certificate, but the key is still the old one
    assert not reloader.check()
    with pki.client(server.port) as conn:  # still serving, with the previous pair
        assert serial(conn) == original

    bump(pki.paths.tls_key, key_pem)  # the writer finishes
    assert reloader.check()
    assert reloader.last_error is None
    with pki.client(server.port) as conn:
        assert serial(conn) == cert_from_pem(cert_pem).serial_number


def test_missing_files_are_not_an_error(pki: Pki, served: tuple[TlsServer, CertReloader]) -> None:
    server, reloader = served
    saved = pki.paths.tls_cert.read_bytes()
    pki.paths.tls_cert.unlink()
    assert not reloader.check()
    pki.paths.tls_cert.write_bytes(saved)
    with pki.client(server.port) as conn:
        assert serial(conn) == cert_from_pem(saved).serial_number


def test_reloader_survives_a_failing_hook(pki: Pki,
                                          served: tuple[TlsServer, CertReloader]) -> None:
    _, reloader = served

    def broken(_: datetime) -> None:
        raise RuntimeError("gauge exploded")

    reloader.on_reload(broken)
    cert_pem, key_pem = pki.issue()
    bump(pki.paths.tls_key, key_pem)
    bump(pki.paths.tls_cert, cert_pem)
    assert reloader.check()


def test_run_polls_on_the_event_loop(pki: Pki, served: tuple[TlsServer, CertReloader]) -> None:
    _, reloader = served
    cert_pem, key_pem = pki.issue()

    async def scenario() -> None:
        task = asyncio.create_task(reloader.run())
        bump(pki.paths.tls_key, key_pem)
        bump(pki.paths.tls_cert, cert_pem)
        for _ in range(100):
            if reloader.not_after == cert_from_pem(cert_pem).not_valid_after_utc:
                break
            await asyncio.sleep(0.02)
        task.cancel()

    asyncio.run(scenario())
    assert reloader.not_after == cert_from_pem(cert_pem).not_valid_after_utc


def test_handshakes_never_fail_while_the_pair_is_swapped_from_another_thread(tmp_path: Path) -> None:
    """A reload from a thread must not race the event loop's handshakes.

    Reloading the listening context in place set certificate and key in two
    steps with the GIL released; a handshake in between got the new
    certificate without its key and was cut off (about 1 in 13 here).
    """
    ca, ca_key = new_ca("swap-ca", 30)
    pairs = [new_serving_cert(ca, ca_key, ["localhost"], ["127.0.0.1"], 30) for _ in range(2)]

    def put(i: int) -> None:
        cert, key = pairs[i % 2]
        write_atomic(tmp_path / "tls.key", key_to_pem(key), 0o600)
        write_atomic(tmp_path / "tls.crt", cert_to_pem(cert), 0o644)

    put(0)
    listening = make_server_ssl_context(CertPaths(tmp_path, tmp_path / "tls.crt",
                                                  tmp_path / "tls.key", None, False))
    reloader = CertReloader(listening, tmp_path / "tls.crt", tmp_path / "tls.key")
    client = ssl.create_default_context(cadata=cert_to_pem(ca).decode())
    served: set[bytes] = set()

    async def answer(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(b"ok")
        await w.drain()
        w.close()

    async def handshakes(n: int) -> list[str]:
        server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=listening)
        port = server.sockets[0].getsockname()[1]
        stop = threading.Event()

        def swap() -> None:
            i = 0
            while not stop.is_set():
                i += 1
                put(i)
                reloader.check()

        swapper = threading.Thread(target=swap)
        swapper.start()
        failures: list[str] = []
        try:
            for _ in range(n):
                try:
                    r, w = await asyncio.open_connection("127.0.0.1", port, ssl=client,
                                                         server_hostname="localhost")
                    served.add(w.get_extra_info("ssl_object").getpeercert(binary_form=True))
                    await r.read()
                    w.close()
                except (OSError, ssl.SSLError) as exc:
                    failures.append(repr(exc))
        finally:
            stop.set()
            swapper.join()
            server.close()
        return failures

    assert asyncio.run(handshakes(600)) == []
    assert len(served) == 2  # both pairs were really served across the swaps
