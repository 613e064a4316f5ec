"""Who owns a stack: the rule (devstack/ownership.py) and `up`/`release` applying it.

A bench script run inside a test session once took the session's stack over (`up`
without a pid marked it "manual"), and the stack outlived the session in CI.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

import devstack.stack as stack_mod
from devstack import StackConfig
from devstack.handle import Stack
from devstack.ownership import MANUAL, SESSION, owner_after_up, release_stops
from devstack.state import add_user, live_users


@pytest.mark.parametrize(("recorded", "by_hand", "other_users", "owner"), [
    (None, False, False, SESSION),  # started to be released
    (None, True, False, MANUAL),  # started by hand: only `down` stops it
    (SESSION, False, True, SESSION),  # a bench beside a session joins it
    (SESSION, False, False, SESSION),
    (SESSION, True, True, SESSION),  # by hand, a live session's stack stays the session's
    (SESSION, True, False, MANUAL),  # its sessions all died: nobody would release it
    (MANUAL, False, True, MANUAL),
    (MANUAL, False, False, MANUAL),  # a session joining a stack started by hand never stops it
    (MANUAL, True, False, MANUAL),
])
def test_joining_never_takes_a_live_users_stack_over(recorded, by_hand, other_users, owner) -> None:
    assert owner_after_up(recorded, by_hand=by_hand, other_users=other_users) == owner


def test_only_the_last_release_of_a_session_stack_stops_it() -> None:
    assert release_stops(SESSION, 0)
    assert not release_stops(SESSION, 1)
    assert not release_stops(MANUAL, 0)


@pytest.fixture
def session_stack(tmp_path, monkeypatch) -> Iterator[tuple[StackConfig, subprocess.Popen]]:
    """A stack state.json says a live test session (a `sleep`) started and uses; `up`
    finds it healthy and starts nothing."""
    monkeypatch.setattr(stack_mod, "_healthy", lambda stack: True)
    monkeypatch.setattr(stack_mod, "bring_up", lambda stack, tier, log: None)
    monkeypatch.setattr(Stack, "ensure_pki", lambda self: None)
    monkeypatch.setattr(Stack, "write_kubeconfig", lambda self: None)
    config = StackConfig(stack_dir=tmp_path / "stack", bin_dir=tmp_path / "bin")
    config.stack_dir.mkdir()
    Stack(config).record(tier="e2e", owner=SESSION, kueue_mode=config.kueue_mode)
    session = subprocess.Popen(["sleep", "300"])
    add_user(config.stack_dir, session.pid)
    try:
        yield config, session
    finally:
        session.kill()
        session.wait()


@pytest.mark.parametrize("call", ["no pid", "own pid", "by hand"])
def test_a_call_joining_a_session_stack_leaves_it_to_the_session(session_stack, call) -> None:
    config, session = session_stack[0], session_stack[1].pid
    kwargs = {"no pid": {}, "own pid": {"user_pid": 4242424}, "by hand": {"by_hand": True}}[call]
    stack, started = stack_mod.up("e2e", config, quiet=True, **kwargs)
    assert not started
    assert stack.owner == SESSION, f"up ({call}) took the session's stack over"
    # The joiner, done first, leaves the stack to the session it belongs to...
    assert not stack_mod.release(config, kwargs.get("user_pid"))
    assert Stack.load(config) is not None
    # ...and the session's release stops it.
    assert stack_mod.release(config, session)
    assert Stack.load(config) is None


def test_a_session_ending_first_leaves_the_stack_to_the_joiner(session_stack) -> None:
    config, session = session_stack[0], session_stack[1].pid
    stack_mod.up("e2e", config, quiet=True)  # a bench run, this process
    assert not stack_mod.release(config, session)
    assert Stack.load(config) is not None, "the session stopped the stack under the bench"
    assert stack_mod.release(config)
    assert Stack.load(config) is None


def test_up_by_hand_keeps_a_stack_its_dead_sessions_left(session_stack) -> None:
    config, session = session_stack
    session.kill()  # a test session killed before its release
    session.wait()
    stack, _ = stack_mod.up("e2e", config, quiet=True, by_hand=True)
    assert stack.owner == MANUAL
    assert not live_users(config.stack_dir), "`up` by hand never releases, so it is no user"
    assert not stack_mod.release(config, session.pid)
    assert Stack.load(config) is not None
