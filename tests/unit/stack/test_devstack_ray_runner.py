"""devstack/ray/runner.py: a worker node the autoscaler drained is an end, not a failure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devstack.ray.procs import RayProcess
from devstack.ray.runner import drained

# The end of what `ray start --block` printed for a worker drained as idle (a CI-like run).
DRAINED_LOG = """\
ERR scripts.py:1307 -- Some Ray subprocesses exited unexpectedly:
ERR scripts.py:115 -- ----- BEGIN raylet.out tail (exit code(s)=-6 (signal 6)) -----
(raylet) node_manager.cc:2245: Drain raylet RPC has received. Deadline is 0.
(raylet) main.cc:481: Raylet graceful shutdown triggered with death info: reason: AUTOSCALER_DRAIN_IDLE
ERR scripts.py:128 -- ----- END raylet.out tail (exit code(s)=-6 (signal 6)) -----
ERR scripts.py:1315 -- Remaining processes will be killed.
"""
CRASHED_LOG = DRAINED_LOG.replace("reason: AUTOSCALER_DRAIN_IDLE", "reason: UNEXPECTED_TERMINATION")


class Exited:
    def __init__(self, code: int | None) -> None:
        self.code, self.pid = code, 999_999

    def poll(self) -> int | None:
        return self.code


def node(tmp_path: Path, log: str, code: int | None = 1, **kw: Any) -> RayProcess:
    path = tmp_path / "worker.log"
    path.write_text(log)
    return RayProcess("rc-worker-w1", Exited(code), path, **kw)  # type: ignore[arg-type]


def test_a_worker_the_autoscaler_drained_is_not_a_failure(tmp_path: Path) -> None:
    assert drained(node(tmp_path, DRAINED_LOG))
    assert drained(node(tmp_path, DRAINED_LOG.replace("_IDLE", "_PREEMPTED")))


def test_any_other_exit_still_is(tmp_path: Path) -> None:
    assert not drained(node(tmp_path, CRASHED_LOG))
    assert not drained(node(tmp_path, "Traceback (most recent call last):\n  ...\n"))


def test_only_an_exited_node_not_already_stopping(tmp_path: Path) -> None:
    assert not drained(node(tmp_path, DRAINED_LOG, code=None))
    assert not drained(node(tmp_path, DRAINED_LOG, stopping=12.0))
