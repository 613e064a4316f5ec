"""app.runtime.start: one frozen record of what was built, offline (no cluster) here."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from raykueue.app.runtime import start
from raykueue.app.settings import Settings
from raykueue.certs.issue import cert_from_pem


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
