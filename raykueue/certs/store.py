"""Serving certificates on disk: create when absent, reload when replaced.

Files follow the kubernetes.io/tls Secret layout (`tls.crt`, `tls.key`, plus
`ca.crt`) so a mounted Secret from cert-manager or an operator drops in as is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from raykueue.certs.issue import (
    cert_from_pem,
    cert_to_pem,
    key_from_pem,
    key_to_pem,
    new_ca,
    new_serving_cert,
)
from raykueue.certs.serving import ServingContext, new_server_context

log = logging.getLogger(__name__)

CA_CERT, CA_KEY, TLS_CERT, TLS_KEY = "ca.crt", "ca.key", "tls.crt", "tls.key"


class HalfPair(ValueError):
    """A cert dir holds one file of a certificate/key pair but not the other."""

    def __init__(self, have: Path, lacks: Path) -> None:
        super().__init__(f"{have} is there but {lacks} is not")
        self.have, self.lacks = have, lacks


@dataclass(frozen=True, slots=True)
class CertPaths:
    cert_dir: Path
    tls_cert: Path
    tls_key: Path
    ca_cert: Path | None  # None when serving files were given without a CA
    generated: bool  # whether this call wrote new serving files

    def ca_pem(self) -> bytes | None:
        return self.ca_cert.read_bytes() if self.ca_cert else None


def ensure_certs(cert_dir: str | os.PathLike[str],
                 dns_names: Iterable[str] = ("localhost",),
                 ip_addresses: Iterable[str] = ("127.0.0.1",), *,
                 ca_days: int = 3650, serving_days: int = 365,
                 renew_within: timedelta | None = None) -> CertPaths:
    """Serving files in `cert_dir`, issuing them only when needed.

    Existing `tls.crt`/`tls.key` are used as given; one without the other (unless
    `ca.crt` and `ca.key` are there to reissue it), or `ca.crt` without `ca.key`,
    raises HalfPair: a file raykueue was given is never overwritten. Otherwise a serving pair
    is issued from `ca.crt`/`ca.key` when present (so the caBundle clients
    trust stays the same), or from a new CA written alongside it.

    With `renew_within`, a serving certificate that expires within that
    window is reissued, but only when `ca.key` is here too: without it the
    files are someone else's to rotate.
    """
    root = Path(cert_dir)
    if not root.exists():
        root.mkdir(mode=0o700, parents=True)
    tls_cert, tls_key, ca_cert, ca_key = (root / n for n in (TLS_CERT, TLS_KEY, CA_CERT, CA_KEY))
    dns, ips = list(dns_names), list(ip_addresses)
    if not dns and not ips:
        raise ValueError("need at least one DNS name or IP address to serve on")

    if tls_cert.exists() and tls_key.exists() and not _due(tls_cert, ca_key, renew_within):
        return CertPaths(root, tls_cert, tls_key, ca_cert if ca_cert.exists() else None, False)
    # Half a pair is someone's certificate missing its key (or the reverse): issuing a
    # new pair would write over the half they gave, so refuse and say which is missing.
    # A serving half next to a whole CA is ours (issued from that CA): reissued from it.
    own_ca = ca_cert.exists() and ca_key.exists()
    halves = [(ca_cert, ca_key), (ca_key, ca_cert)]
    if not own_ca:
        halves += [(tls_cert, tls_key), (tls_key, tls_cert)]
    for have, lacks in halves:
        if have.exists() and not lacks.exists():
            raise HalfPair(have, lacks)

    if ca_cert.exists() and ca_key.exists():
        ca = cert_from_pem(ca_cert.read_bytes())
        signer = key_from_pem(ca_key.read_bytes())
    else:
        ca, signer = new_ca(f"{(dns + ips)[0]} CA", ca_days)
        # Key before certificate: a reader never sees a CA cert without its key.
        write_atomic(ca_key, key_to_pem(signer), 0o600)
        write_atomic(ca_cert, cert_to_pem(ca), 0o644)
    cert, key = new_serving_cert(ca, signer, dns, ips, serving_days)
    write_atomic(tls_key, key_to_pem(key), 0o600)
    write_atomic(tls_cert, cert_to_pem(cert), 0o644)
    log.info("issued serving certificate for %s in %s", ", ".join(dns + ips), root)
    return CertPaths(root, tls_cert, tls_key, ca_cert, True)


def _due(tls_cert: Path, ca_key: Path, renew_within: timedelta | None) -> bool:
    if renew_within is None or not ca_key.exists():
        return False
    try:
        expires = cert_from_pem(tls_cert.read_bytes()).not_valid_after_utc
    except ValueError:
        return True
    return expires - datetime.now(UTC) < renew_within


def write_atomic(path: Path, data: bytes, mode: int) -> None:
    """Replace `path` so readers see the old or the new bytes, never a mix.

    The temporary file gets `mode` before any byte is written, so a key is
    never readable by others even for an instant.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def make_server_ssl_context(paths: CertPaths) -> ssl.SSLContext:
    """TLS 1.2+ server context holding the serving pair from `paths`."""
    ctx = new_server_context()
    ctx.load_cert_chain(paths.tls_cert, paths.tls_key)
    return ctx


Signature = tuple[tuple[int, int, int], ...]
ReloadHook = Callable[[datetime], None]


def _signature(*files: Path) -> Signature | None:
    # mtime+size+inode: catches in-place writes, renames and the symlink swap
    # kubelet does when a mounted Secret changes; no inotify needed.
    try:
        return tuple((st.st_mtime_ns, st.st_size, st.st_ino) for st in map(os.stat, files))
    except OSError:
        return None


class CertReloader:
    """Keep a `ServingContext` serving whatever pair is in two files.

    For `--cert-dir` and a mounted Secret: each change of the files is read
    into memory once (so a writer replacing them meanwhile cannot pair one
    file's old content with the other's new) and handed over as bytes; see
    `certs.serving` for how new connections get it. A half-written or
    mismatched pair fails to load and is ignored (and logged) until the
    files change again.

    `start()` polls from a thread; `run()` polls on an event loop.
    """

    def __init__(self, serving: ServingContext | ssl.SSLContext, cert_path: str | os.PathLike[str],
                 key_path: str | os.PathLike[str], poll_seconds: float = 2.0) -> None:
        self.serving = serving if isinstance(serving, ServingContext) else ServingContext(serving)
        self.cert_path, self.key_path = Path(cert_path), Path(key_path)
        self.poll_seconds = poll_seconds
        self._lock = threading.Lock()
        self._seen: Signature | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.check()

    @property
    def loaded(self) -> bool:
        return self.serving.loaded

    @property
    def not_after(self) -> datetime | None:
        return self.serving.not_after

    @property
    def last_error(self) -> str | None:
        return self.serving.last_error

    def on_reload(self, fn: ReloadHook) -> None:
        """Call `fn(not_after)` after every load, and now if already loaded."""
        self.serving.on_load(fn)

    def check(self) -> bool:
        """Poll once; True if a new pair was loaded."""
        with self._lock:
            sig = _signature(self.cert_path, self.key_path)
            if sig is None or sig == self._seen:
                return False
            self._seen = sig
            try:
                cert_pem, key_pem = self.cert_path.read_bytes(), self.key_path.read_bytes()
            except OSError as exc:
                # Replaced between stat and read; the next change retries.
                log.warning("serving certificate %s not read: %s", self.cert_path, exc)
                return False
            return self.serving.load(cert_pem, key_pem, str(self.cert_path))

    # -- polling -----------------------------------------------------------------

    async def run(self) -> None:
        """Poll on the current event loop until cancelled."""
        while True:
            await asyncio.sleep(self.poll_seconds)
            self.check()

    def start(self) -> CertReloader:
        if self._thread is None:
            self._thread = threading.Thread(target=self._poll, name="cert-reloader",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            try:
                self.check()
            except Exception:
                log.exception("certificate reload check failed")
