"""Settings: environment names and the checks that stop a bad start early."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from raykueue.app.settings import Settings
from raykueue.core import contract as c


def test_lease_timing_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYKUEUE_LEASE_SECONDS", "6")
    monkeypatch.setenv("RAYKUEUE_RENEW_SECONDS", "4")
    monkeypatch.setenv("RAYKUEUE_RETRY_SECONDS", "1")
    s = Settings()
    assert (s.lease_seconds, s.renew_seconds, s.retry_seconds) == (6, 4.0, 1.0)


@pytest.mark.parametrize("lease, renew, retry", [(10, 10, 2), (15, 10, 10), (15, 20, 2), (15, 10, 0)])
def test_lease_timing_that_could_overlap_two_leaders_is_refused(lease: int, renew: float,
                                                                 retry: float) -> None:
    with pytest.raises(ValidationError, match="RAYKUEUE_RENEW_SECONDS"):
        Settings(lease_seconds=lease, renew_seconds=renew, retry_seconds=retry)


def test_idle_connections_outlive_the_api_servers_and_reach_uvicorn(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import ssl

    from raykueue.app.cli import uvicorn_config

    api_server_idle_seconds = 90  # Go's http.DefaultTransport, see Settings.keep_alive_seconds
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    default = uvicorn_config(Settings(port=0), _app, context)
    assert default.timeout_keep_alive > api_server_idle_seconds
    assert default.ssl is context
    monkeypatch.setenv("RAYKUEUE_KEEP_ALIVE_SECONDS", "7")
    assert uvicorn_config(Settings(port=0), _app, context).timeout_keep_alive == 7


async def _app(scope: object, receive: object, send: object) -> None:
    pass


def test_the_event_loop_waits_at_most_half_a_millisecond_for_the_gil(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Python's 5 ms switch interval put the webhook 17% behind the ceiling (bench/RESULTS.md)."""
    import gc
    import sys

    from raykueue.app.cli import tune_interpreter

    before = sys.getswitchinterval()
    try:
        tune_interpreter(Settings())
        assert sys.getswitchinterval() == pytest.approx(0.0005)
        monkeypatch.setenv("RAYKUEUE_SWITCH_INTERVAL_MS", "2")
        tune_interpreter(Settings())
        assert sys.getswitchinterval() == pytest.approx(0.002)
    finally:
        sys.setswitchinterval(before)
        gc.unfreeze()


def test_controller_identity_is_derived_from_the_pods_service_account(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().controller_identities == ["system:serviceaccount:raykueue-system:raykueue"]
    monkeypatch.setenv("RAYKUEUE_POD_NAMESPACE", "ray-ops")
    monkeypatch.setenv("RAYKUEUE_SERVICE_ACCOUNT", "rk")
    assert Settings().controller_identities == ["system:serviceaccount:ray-ops:rk"]
    # Set explicitly, the list is taken as it is (another process runs the controller).
    monkeypatch.setenv("RAYKUEUE_CONTROLLER_IDENTITIES", "ci-bot,system:serviceaccount:x:y")
    assert Settings().controller_identities == ["ci-bot", "system:serviceaccount:x:y"]


def test_head_only_priority_classes_default_to_the_head_class_and_never_hold_the_workers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().priority_policy.head_only_classes == {c.DEFAULT_HEAD_PRIORITY_CLASS}
    monkeypatch.setenv("RAYKUEUE_HEAD_PRIORITY_CLASS", "gold")
    assert Settings().priority_policy.head_only_classes == {"gold"}
    monkeypatch.setenv("RAYKUEUE_HEAD_ONLY_PRIORITY_CLASSES", "gold,platinum")
    assert Settings().priority_policy.head_only_classes == {"gold", "platinum"}
    monkeypatch.setenv("RAYKUEUE_WORKER_PRIORITY_CLASS", "platinum")
    with pytest.raises(ValueError, match="every worker would be denied"):
        Settings()
