"""raykueue_leader is 1 exactly while this replica leads (the NoLeader alert's input)."""

from __future__ import annotations

import threading

from prometheus_client import REGISTRY

from raykueue.app.leadership import ControllerHost
from raykueue.app.settings import Settings
from testkit.waiting import wait_for


def leader() -> float | None:
    return REGISTRY.get_sample_value("raykueue_leader")


def test_the_gauge_follows_leadership() -> None:
    # Without leader election the replica leads from the start until it stops.
    host = ControllerHost(rest=None, settings=Settings(leader_election=False),  # type: ignore[arg-type]
                          run_controller=False)
    stop = threading.Event()
    thread = threading.Thread(target=host.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_for(lambda: host.is_leader() and leader() == 1, timeout=10, message="leading")
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()
    assert leader() == 0 and not host.is_leader()
