"""certs.serving: pairs handed over as bytes, a bad one refused with the old one kept."""

from __future__ import annotations

import ssl
from datetime import datetime

from raykueue.certs.issue import cert_from_pem, cert_to_pem, key_to_pem, new_ca, new_serving_cert
from raykueue.certs.serving import ServingContext


def pair(days: int) -> tuple[bytes, bytes]:
    ca, ca_key = new_ca("serving-test", 30)
    cert, key = new_serving_cert(ca, ca_key, ["localhost"], [], days)
    return cert_to_pem(cert), key_to_pem(key)


def test_a_pair_loads_from_bytes() -> None:
    cert, key = pair(5)
    serving = ServingContext.from_pem(cert, key)
    assert serving.loaded and serving.not_after == cert_from_pem(cert).not_valid_after_utc


def test_a_bad_pair_is_refused_and_the_previous_kept() -> None:
    cert, key = pair(5)
    serving = ServingContext.from_pem(cert, key)
    loads: list[datetime] = []
    serving.on_load(loads.append)
    assert loads == [serving.not_after]  # told the current expiry at once

    other_cert, other_key = pair(7)
    assert not serving.load(other_cert, key)  # mismatched: refused
    assert serving.last_error and serving.not_after == cert_from_pem(cert).not_valid_after_utc
    assert len(loads) == 1

    assert serving.load(other_cert, other_key)
    assert serving.last_error is None
    assert serving.not_after == cert_from_pem(other_cert).not_valid_after_utc
    assert loads[-1] == serving.not_after and len(loads) == 2


def _handshake(server_context: ssl.SSLContext, ca_pem: bytes) -> None:
    """One TLS handshake in memory (no sockets), the client trusting `ca_pem`."""
    client_context = ssl.create_default_context(cadata=ca_pem.decode())
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_context.wrap_bio(c_in, c_out, server_hostname="localhost")
    server = server_context.wrap_bio(s_in, s_out, server_side=True)
    done = {"client": False, "server": False}
    for _ in range(10):
        for name, side, out, peer_in in (("client", client, c_out, s_in),
                                         ("server", server, s_out, c_in)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
            peer_in.write(out.read())
        if all(done.values()):
            return
    raise AssertionError(f"handshake did not finish: {done}")


def test_every_handshake_is_counted_by_the_hello_hook() -> None:
    ca, ca_key = new_ca("serving-test", 30)
    cert, key = new_serving_cert(ca, ca_key, ["localhost"], [], 5)
    serving = ServingContext.from_pem(cert_to_pem(cert), key_to_pem(key))
    hellos: list[int] = []
    serving.on_hello = lambda: hellos.append(1)
    _handshake(serving.context, cert_to_pem(ca))
    # After a reload the hand-over to the new context still counts.
    other, other_key = new_serving_cert(ca, ca_key, ["localhost"], [], 7)
    assert serving.load(cert_to_pem(other), key_to_pem(other_key))
    _handshake(serving.context, cert_to_pem(ca))
    assert len(hellos) == 2
