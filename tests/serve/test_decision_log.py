"""`raykueue serve` as a process: every answered review's decision line is in its log, whole,
also when the server is stopped right after answering (the lines are written by a
thread, off the event loop)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import orjson

from raykueue.core import contract as c
from testkit import reviews as rv
from testkit.waiting import wait_for
from tests.serve.test_serve import _ctx, _healthy, free_port

ROOT = Path(__file__).resolve().parents[2]


def test_a_stopped_server_has_written_the_line_of_every_review_it_answered(
        tmp_path: Path) -> None:
    port, cert_dir, log = free_port(), tmp_path / "certs", tmp_path / "server.log"
    env = {**os.environ, "RAYKUEUE_HOST": "127.0.0.1", "KUBECONFIG": str(tmp_path / "none"),
           "RAYKUEUE_LOG_FORMAT": "json"}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "raykueue.app.cli", "serve", "--port", str(port), "--cert-dir",
             str(cert_dir)], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: _healthy(port, cert_dir / "ca.crt"), timeout=30,
                 message=lambda: f"server did not start:\n{log.read_text()}")
        body = rv.set_label(rv.worker_review(), c.OPTED_IN_LABEL, c.OPTED_IN_VALUE)
        body = rv.set_label(body, c.QUEUE_LABEL, "team-a")
        uids = [f"uid-{i}" for i in range(300)]
        with httpx.Client(verify=_ctx(cert_dir / "ca.crt"), timeout=10) as client:
            for uid in uids:
                body["request"]["uid"] = uid
                answer = client.post(f"https://127.0.0.1:{port}{c.MUTATE_PATH}", json=body)
                assert answer.json()["response"]["uid"] == uid
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    lines = [orjson.loads(line) for line in log.read_bytes().splitlines()
             if line.startswith(b"{")]
    decided = [line["uid"] for line in lines if line.get("msg") == "admission decision"]
    assert decided == uids
