"""app.leadership: a controller that fails makes the replica not ready, then is retried."""

from __future__ import annotations

import threading

import pytest

from raykueue.app.leadership import ControllerHost
from raykueue.app.settings import Settings
from testkit.waiting import wait_for


class FlakyController:
    """Fails to start the first time, runs until told to stop the second."""

    starts = 0

    def __init__(self, *_args: object, **_kwargs: object) -> None:
        FlakyController.starts += 1
        self.attempt = FlakyController.starts

    def run(self, lost: threading.Event) -> None:
        if self.attempt == 1:
            raise RuntimeError("caches never synced")
        lost.wait()

    def conflicts(self) -> dict[str, str]:
        return {}


def test_a_failed_controller_is_not_ready_until_it_runs_again(
        monkeypatch: pytest.MonkeyPatch) -> None:

    FlakyController.starts = 0
    from raykueue.controller import loop

    monkeypatch.setattr(loop, "Controller", FlakyController)
    monkeypatch.setattr("raykueue.app.leadership.EventRecorder", lambda *_: None)
    settings = Settings(leader_election=False, retry_seconds=0.2, renew_seconds=0.5,
                        lease_seconds=1)
    host = ControllerHost(None, settings)  # type: ignore[arg-type]
    seen: list[tuple[bool, str]] = []
    stop = threading.Event()
    thread = threading.Thread(target=host.run, args=(stop,), daemon=True)
    thread.start()
    try:
        def failed() -> bool:
            seen.append(host.status())
            return not seen[-1][0]

        wait_for(failed, timeout=5, interval=0.01, message="/readyz reports the failed controller")
        detail = seen[-1][1]
        assert detail.startswith("not leading") and "caches never synced" in detail
        assert not host.is_leader()
        wait_for(lambda: host.status() == (True, "leading"), timeout=5,
                 message="the controller runs again after the backoff")
        assert FlakyController.starts == 2
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()
