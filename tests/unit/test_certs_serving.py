"""certs.serving: pairs handed over as bytes, a bad one refused with the old one kept."""

from __future__ import annotations

from datetime import datetime

from certs.issue import cert_from_pem, cert_to_pem, key_to_pem, new_ca, new_serving_cert
from certs.serving import ServingContext


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
