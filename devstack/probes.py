"""Small readiness checks the component declarations are built from."""

from __future__ import annotations

import contextlib
import socket
import ssl
import urllib.error
import urllib.request


def http_ok(url: str, ctx: ssl.SSLContext | None = None, timeout: float = 2.0) -> tuple[bool, str]:
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=timeout) as r:
            body = r.read(2000).decode(errors="replace")
            return r.status == 200, body
    except urllib.error.HTTPError as e:
        return False, f"HTTP {e.code}: {e.read(2000).decode(errors='replace')}"
    except (OSError, ssl.SSLError) as e:
        return False, str(e)


def insecure() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def secure_healthz(port: int) -> tuple[bool, str]:
    """/healthz of a component serving its own self-signed certificate."""
    return http_ok(f"https://127.0.0.1:{port}/healthz", insecure())


def tls_port_open(port: int) -> bool:
    """A full TLS handshake (a bare connect makes Go servers log handshake errors)."""
    with contextlib.suppress(OSError, ssl.SSLError), \
            socket.create_connection(("127.0.0.1", port), timeout=1) as raw, \
            insecure().wrap_socket(raw, server_hostname="localhost"):
        return True
    return False


def condition(obj: dict, ctype: str) -> str | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c.get("status")
    return None
