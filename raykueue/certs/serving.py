"""The TLS context the server listens with, fed certificate and key as bytes.

Whoever holds the pair (the Secret keeper, the cert-dir reloader) hands its
PEM bytes to `ServingContext.load`; nothing has to pass through files the
server polls. OpenSSL's Python binding loads a certificate chain from a path
only, so the bytes go through anonymous in-memory files (memfd): the key
never lands on a filesystem.

Each load builds a fresh context, and the listening context's SNI callback
(which OpenSSL calls on every ClientHello, with or without a server name)
hands each new connection the newest one. The listening context itself is
never reloaded: `load_cert_chain` sets certificate and key in two steps with
the GIL released, and a handshake starting in between (on the event loop,
while a load runs in a thread) would get a certificate without its key and
be cut off. Open connections keep the certificate they started with.

The same callback counts handshakes (`on_hello`): each one is a ClientHello,
so a client that keeps its connections alive shows few per thousand requests.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import ssl
import tempfile
import threading
from collections.abc import Callable, Iterator
from datetime import datetime

from raykueue.certs.issue import cert_from_pem

log = logging.getLogger(__name__)

LoadHook = Callable[[datetime], None]


def _nothing() -> None:
    pass


def new_server_context() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def context_from_pem(cert_pem: bytes, key_pem: bytes) -> ssl.SSLContext:
    """A TLS 1.2+ server context holding this pair; raises on a bad or mismatched pair."""
    ctx = new_server_context()
    with _in_memory(cert_pem, key_pem) as (cert_path, key_path):
        ctx.load_cert_chain(cert_path, key_path)
    return ctx


@contextlib.contextmanager
def _in_memory(*blobs: bytes) -> Iterator[list[str]]:
    """Paths that read back `blobs`, backed by memory where the OS allows it."""
    if not hasattr(os, "memfd_create"):
        # Not Linux: a private directory, removed at once.
        scratch = tempfile.mkdtemp(prefix="raykueue-tls-")  # 0700
        try:
            paths = []
            for i, blob in enumerate(blobs):
                path = os.path.join(scratch, str(i))
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(blob)
                paths.append(path)
            yield paths
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return
    fds: list[int] = []
    try:
        for blob in blobs:
            fd = os.memfd_create("raykueue-tls", os.MFD_CLOEXEC)
            fds.append(fd)
            view = memoryview(blob)
            while view:
                view = view[os.write(fd, view):]
        yield [f"/proc/self/fd/{fd}" for fd in fds]
    finally:
        for fd in fds:
            os.close(fd)


class ServingContext:
    """Serve the pair loaded last on `context`, the context the server listens with."""

    def __init__(self, listening: ssl.SSLContext) -> None:
        self.context = listening
        listening.sni_callback = self._hand_over
        self._current = listening
        self._lock = threading.Lock()
        self._hooks: list[LoadHook] = []
        self.loaded = False
        self.not_after: datetime | None = None
        self.last_error: str | None = None
        # Called on every ClientHello, on the event loop: keep it to a counter's inc().
        self.on_hello: Callable[[], None] = _nothing

    @classmethod
    def from_pem(cls, cert_pem: bytes, key_pem: bytes) -> ServingContext:
        """Listen with this pair until another is loaded."""
        serving = cls(context_from_pem(cert_pem, key_pem))
        serving._loaded(cert_from_pem(cert_pem).not_valid_after_utc)
        return serving

    def on_load(self, fn: LoadHook) -> None:
        """Call `fn(not_after)` after every load, and now if a pair is loaded."""
        with self._lock:
            self._hooks.append(fn)
            current = self.not_after if self.loaded else None
        if current is not None:
            _call(fn, current)

    def load(self, cert_pem: bytes, key_pem: bytes, source: str = "") -> bool:
        """Serve this pair to new connections; False (the previous one kept) if it is unusable."""
        try:
            expires = cert_from_pem(cert_pem).not_valid_after_utc
            fresh = context_from_pem(cert_pem, key_pem)
        except (OSError, ValueError, ssl.SSLError) as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("serving certificate %snot loaded (kept the previous one): %s",
                        f"{source} " if source else "", self.last_error)
            return False
        self._current = fresh  # one reference swap: atomic for the handshake reading it
        log.info("loaded serving certificate %s(expires %s)", f"{source} " if source else "",
                 expires.isoformat())
        self._loaded(expires)
        return True

    def _loaded(self, expires: datetime) -> None:
        with self._lock:
            self.loaded, self.not_after, self.last_error = True, expires, None
            hooks = tuple(self._hooks)
        for fn in hooks:
            _call(fn, expires)

    def _hand_over(self, conn: ssl.SSLObject | ssl.SSLSocket, _server_name: str | None,
                   listening: ssl.SSLContext) -> None:
        self.on_hello()
        current = self._current
        if current is not listening:
            conn.context = current


def _call(fn: LoadHook, expires: datetime) -> None:
    try:
        fn(expires)
    except Exception:
        log.exception("certificate load hook %r failed", fn)
