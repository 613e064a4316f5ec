"""The applier's table: every action decide can return has exactly one handler."""

from __future__ import annotations

import logging
import typing

from raykueue.controller import actions as a
from raykueue.controller import handlers as h
from raykueue.controller.apply import HANDLERS, apply
from raykueue.controller.config import ControllerConfig
from raykueue.controller.keys import PodKey
from raykueue.controller.state import State
from testkit.controller_world import World


def test_every_action_type_has_a_handler_and_nothing_else_does():
    assert set(HANDLERS) == set(typing.get_args(a.Action))


def test_warning_without_a_pod_is_logged_and_writes_nothing(caplog):
    world = World()
    events: list[object] = []

    class Recorder:
        def record(self, *args, **kw) -> None:
            events.append(args)

    env = h.Env(world, ControllerConfig(), world.version, State(),  # type: ignore[arg-type]
                Recorder(), lambda: 0.0)
    caplog.set_level(logging.WARNING, logger="raykueue.controller")
    apply(env, a.Warn(a.WARN_LABEL_REMOVED, "leaving it alone"), h.Pass(PodKey("ns", "gone"), None, {}))
    assert world.requests == [] and events == []
    assert [r.getMessage() for r in caplog.records] == ["ns/gone: leaving it alone"]
