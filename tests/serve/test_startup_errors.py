"""`raykueue serve` that cannot start says so in one line naming what to fix.

What `kubectl logs` shows of a CrashLoopBackOff: each case runs the real process and
reads everything it wrote. No traceback, exactly one error line, and that line names
the environment variable, flag or file and a fix.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

ROOT = Path(__file__).resolve().parents[2]


def serve(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
          port: int | None = None) -> tuple[int, list[str]]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAYKUEUE_")}
    clean.update({"RAYKUEUE_CLUSTER": "false", "RAYKUEUE_HOST": "127.0.0.1",
                  "KUBECONFIG": str(tmp_path / "none"), **(env or {})})
    argv = [sys.executable, "-m", "raykueue.app.cli", "serve", "--port", str(port or free_port()),
            *args]
    if "--cert-dir" not in args:
        argv += ["--cert-dir", str(tmp_path / "certs")]
    done = subprocess.run(argv, cwd=ROOT, env=clean, capture_output=True, text=True, timeout=60)
    return done.returncode, (done.stdout + done.stderr).splitlines()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def the_error(lines: list[str]) -> str:
    """The one error line (a JSON log line, or plain text before logging is set up)."""
    assert not any("Traceback" in line for line in lines), "\n".join(lines)
    errors = []
    for line in lines:
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            errors.append(line)  # plain text: only the pre-logging report writes it
            continue
        if entry.get("level") in ("error", "critical"):
            errors.append(entry["msg"])
    assert len(errors) == 1, "\n".join(lines)
    assert "fix:" in errors[0], errors[0]
    assert not any("serving admission" in line for line in lines), "\n".join(lines)
    return errors[0]


@pytest.mark.parametrize(("env", "args", "names"), [
    ({"RAYKUEUE_LEASE_SECONDS": "5"}, (), "RAYKUEUE_LEASE_SECONDS"),
    ({"RAYKUEUE_DNS_NAMES": "[not json"}, (), "RAYKUEUE_DNS_NAMES=[not json"),
    ({"RAYKUEUE_PODS_READY": "maybe"}, (), "RAYKUEUE_PODS_READY=maybe"),
    ({}, ("--log-level", "verbose"), "--log-level verbose"),
    ({"RAYKUEUE_LOG_LEVEL": "verbose"}, (), "RAYKUEUE_LOG_LEVEL=verbose"),
])
def test_a_bad_setting_is_one_line_naming_it(tmp_path: Path, env: dict[str, str],
                                             args: tuple[str, ...], names: str) -> None:
    rc, lines = serve(tmp_path, *args, env=env)
    assert rc == 2
    assert len(lines) == 1, "\n".join(lines)  # nothing else: logging is not set up yet
    assert names in the_error(lines)
    assert not (tmp_path / "certs").exists()  # failed before touching anything


def test_a_certificate_secret_without_a_cluster_names_the_variable(tmp_path: Path) -> None:
    rc, lines = serve(tmp_path, env={"RAYKUEUE_CERT_SECRET": "raykueue-webhook-tls"})
    assert rc == 2
    assert "RAYKUEUE_CERT_SECRET=raykueue-webhook-tls" in the_error(lines)


def test_a_cert_dir_that_cannot_be_made_names_the_dir(tmp_path: Path) -> None:
    # As root a mode bit stops nothing; a regular file where a parent directory should
    # be stops everyone.
    (tmp_path / "file").write_text("")
    cert_dir = tmp_path / "file" / "certs"
    rc, lines = serve(tmp_path, "--cert-dir", str(cert_dir))
    assert rc == 2
    message = the_error(lines)
    assert str(cert_dir) in message and "RAYKUEUE_CERT_DIR" in message


@pytest.fixture
def cert_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "given"
    path.mkdir()
    yield path


def test_a_garbage_certificate_names_the_file(tmp_path: Path, cert_dir: Path) -> None:
    (cert_dir / "tls.crt").write_text("not a certificate\n")
    (cert_dir / "tls.key").write_text("not a key\n")
    rc, lines = serve(tmp_path, "--cert-dir", str(cert_dir))
    assert rc == 2
    assert str(cert_dir / "tls.crt") in the_error(lines)
    assert (cert_dir / "tls.crt").read_text() == "not a certificate\n"


def test_a_users_certificate_without_its_key_is_never_overwritten(tmp_path: Path,
                                                                  cert_dir: Path) -> None:
    # Before: a new self-signed pair went over it, with an info line.
    (cert_dir / "tls.crt").write_text("the user's certificate\n")
    rc, lines = serve(tmp_path, "--cert-dir", str(cert_dir))
    assert rc == 2
    message = the_error(lines)
    assert str(cert_dir / "tls.crt") in message and "tls.key" in message
    assert (cert_dir / "tls.crt").read_text() == "the user's certificate\n"
    assert sorted(p.name for p in cert_dir.iterdir()) == ["tls.crt"]


def test_a_taken_port_is_named_before_anything_says_it_serves(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        rc, lines = serve(tmp_path, port=port)
    assert rc == 2
    message = the_error(lines)
    assert f"127.0.0.1:{port}" in message and "--port" in message
