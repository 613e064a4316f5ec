"""Start, reuse, upgrade and stop the local control plane.

Tier `api`: etcd, kube-apiserver, kube-controller-manager, every CRD and the
sample Kueue objects. Tier `e2e` adds kube-scheduler, kwok (with fake nodes), the
Kueue manager and the KubeRay operator (components.py declares each, plan.py
orders them). Every process binds 127.0.0.1 on a free port, runs in its own
session (so a stack outlives the `up` that started it) and logs to
`<stack dir>/logs/<name>.log`. `<stack dir>/state.json` records pids, ports and
paths so that `down`, `status` and other processes find the stack.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

from . import state
from .components import COMPONENTS
from .config import KUEUE_MODE_ENV, TIERS, StackConfig
from .handle import Stack
from .ownership import SESSION, owner_after_up, release_stops
from .plan import bring_up, components_for, stop_order
from .procs import StackError, free_ports, tail

__all__ = ["Stack", "StackError", "components_for", "down", "free_ports", "let_namespaces_finish",
           "release", "restart_component", "stop_component", "tail", "up"]


def _log(msg: str) -> None:
    print(f"devstack: {msg}", file=sys.stderr, flush=True)


def up(tier: str = "e2e", config: StackConfig | None = None, *, quiet: bool = False,
       user_pid: int | None = None, by_hand: bool = False) -> tuple[Stack, bool]:
    """Start the stack at `tier`, or reuse/upgrade one that is running.

    Returns (stack, started) where `started` is True when this call started etcd
    and the API server. `user_pid` (default: this process) is recorded as a user
    of the stack until it calls `release()`. A stack this call starts is stopped
    by the last live user's `release()` ("session") unless `by_hand` marks it
    "manual", for `down` alone (`python -m devstack up`, which records no user
    unless given one: it exits at once and never releases). Joining a running
    stack never takes it over (ownership.owner_after_up): a bench run inside a
    test session leaves the session's stack to the session.
    Raises StackError naming every component that failed, with its log's tail.
    """
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}")
    config = config or StackConfig()
    if user_pid is None and not by_hand:
        user_pid = os.getpid()
    log = (lambda m: None) if quiet else _log
    with state.locked(config.stack_dir):
        t0 = time.monotonic()
        stack = Stack.load(config)
        started = False
        if stack is not None and not _healthy(stack):
            log("found a stale stack; cleaning it up")
            _down(stack, keep_logs=True)
            stack = None
        if stack is not None and stack.kueue_mode != config.kueue_mode:
            # never serve one Kueue mode's tests from the other's stack
            _other_mode(stack, config.kueue_mode, user_pid, log)
            _down(stack, keep_logs=True)
            stack = None
        recorded = None
        if stack is None:
            stack = Stack(config)
            stack.dir.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(stack.log_dir, ignore_errors=True)
            stack.record()
            started = True
        else:
            recorded = stack.owner
            log(f"reusing the {stack.tier} stack at {stack.dir}")
            stack.write_kubeconfig()
        others = [p for p in state.live_users(stack.dir) if p != user_pid]
        owner = owner_after_up(recorded, by_hand=by_hand, other_users=bool(others))
        if owner != recorded:
            stack.record(owner=owner)
        if by_hand and owner == SESSION:
            log(f"joined, not kept: pids {others} use the stack and the last of them to release "
                "it stops it; `down` and `up` again for a stack that stays")
        if user_pid is not None:
            state.add_user(stack.dir, user_pid)
        stack.ensure_pki()
        bring_up(stack, tier, log)
        log(f"{tier} stack ready in {time.monotonic() - t0:.1f}s; KUBECONFIG={stack.kubeconfig}")
        return stack, started


def _other_mode(stack: Stack, wanted: str, user_pid: int | None, log: Callable[[str], None]) -> None:
    """A stack runs the other Kueue mode: it may go if only a finished session started it."""
    others = [p for p in state.live_users(stack.dir) if p != user_pid]
    if stack.read().owner != SESSION or others:
        who = f"sessions {others} use it" if others else "it was started by hand (`up`)"
        raise StackError(
            f"the stack at {stack.dir} runs Kueue {stack.kueue_mode!r} but {wanted!r} was asked "
            f"({KUEUE_MODE_ENV}); {who}, so it is left alone. Stop it "
            f"(python -m devstack down) or use another RAYKUEUE_STACK_DIR.")
    log(f"the stack at {stack.dir} runs Kueue {stack.kueue_mode!r}, {wanted!r} was asked: restarting it")


def _healthy(stack: Stack, patience: float = 30.0) -> bool:
    """etcd and the API server run and answer /readyz (a busy one gets `patience` s)."""
    core = [stack.procs.get("etcd"), stack.procs.get("kube-apiserver")]
    deadline = time.monotonic() + patience
    while all(p is not None and p.alive() for p in core):
        if stack.apiserver_ready():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return False


def release(config: StackConfig | None = None, user_pid: int | None = None,
            *, keep_logs: bool = True) -> bool:
    """`user_pid` (default: this process) is done with the stack. Stops it (returns
    True) when no live user is left and no one started it by hand."""
    config = config or StackConfig()
    with state.locked(config.stack_dir):
        state.remove_user(config.stack_dir, os.getpid() if user_pid is None else user_pid)
        stack = Stack.load(config)
        if stack is None or not release_stops(stack.owner, len(state.live_users(config.stack_dir))):
            return False
        _down(stack, keep_logs=keep_logs)
        return True


def _down(stack: Stack, keep_logs: bool = True) -> None:
    for name in stop_order(list(stack.procs)):
        stack.stop(name)
    etcd_data = stack.etcd_data
    if etcd_data and Path(etcd_data).name.startswith("raykueue-etcd-"):
        shutil.rmtree(etcd_data, ignore_errors=True)
    stack.state_file.unlink(missing_ok=True)
    stack.kubeconfig.unlink(missing_ok=True)
    shutil.rmtree(state.users_dir(stack.dir), ignore_errors=True)
    if not keep_logs:
        shutil.rmtree(stack.log_dir, ignore_errors=True)


def down(config: StackConfig | None = None, *, keep_logs: bool = True) -> bool:
    """Stop the stack recorded in the stack dir. Returns False if there was none."""
    config = config or StackConfig()
    with state.locked(config.stack_dir):
        stack = Stack.load(config)
        if stack is None:
            return False
        _down(stack, keep_logs=keep_logs)
        return True


def stop_component(stack: Stack, name: str) -> None:
    """Stop one component of a running stack (e.g. to test what happens without it)."""
    with state.locked(stack.dir):
        stack.stop(name)


def let_namespaces_finish(stack: Stack, timeout: float = 120.0) -> None:
    """Wait until no namespace is being deleted (at most `timeout`).

    Just after a start the API server's discovery may not list the custom resources
    yet; a namespace controller that asks then sees no RayCluster to delete and
    finalizes the namespace anyway, leaving the RayCluster behind in etcd, seen by
    every later list (it failed a CI run's cluster-wide uninstall test). An earlier
    test's namespaces go first, while discovery is whole.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            going = [n["metadata"]["name"] for n in stack.api.get("/api/v1/namespaces")["items"]
                     if n["metadata"].get("deletionTimestamp")]
        except Exception as e:  # a dead API server is what the restart is for
            _log(f"could not list namespaces before the restart ({e}); restarting anyway")
            return
        if not going:
            return
        if time.monotonic() >= deadline:
            _log(f"namespaces still terminating after {timeout:.0f}s, restarting anyway: {going}")
            return
        time.sleep(0.5)


def restart_component(stack: Stack, name: str = "kube-apiserver", *,
                      grace: float = 10.0, down_for: float = 0.0,
                      while_down: Callable[[], None] | None = None,
                      argv: list[str] | None = None) -> float:
    """Stop one component and start it again with the same argv and ports (`argv`, when
    given, in place of the argv it ran with: a bench that tunes one flag for its run).

    For the API server this keeps etcd and its data, so every object (and
    resourceVersion) survives and clients reconnect to the same URL, as after
    a rolling restart of a real control plane. `down_for` keeps it stopped a
    while first (fault tests); `while_down` runs once it is stopped (a test that
    starts something during the outage and waits for what it says). Returns the
    seconds from stop to ready again.
    """
    comp = COMPONENTS.get(name)
    if name == "kube-apiserver":
        let_namespaces_finish(stack)
    t0 = time.monotonic()
    with state.locked(stack.dir):
        proc = stack.procs.get(name)
        if proc is None or not proc.argv:
            raise StackError(f"{name} is not running in {stack.dir}; nothing to restart")
        stack.stop(name, grace=grace)
        try:
            if down_for > 0:
                time.sleep(down_for)
            if while_down is not None:
                while_down()
        finally:
            # A failing test must not leave the stack without the component.
            stack.spawn(name, list(argv or proc.argv), dict(proc.ports), stack._env(name) if comp else None)
    if comp is not None and comp.wait_after_restart:
        stack.wait_ready(name, lambda: comp.ready(stack))
    took = time.monotonic() - t0
    if name == "kube-apiserver" and "kube-controller-manager" in stack.procs:
        _controllers_caught_up(stack)
    return took


def _controllers_caught_up(stack: Stack, timeout: float = 180.0) -> None:
    """Wait until the controller-manager acts on new objects again (at most `timeout`).

    Its informers back off while the API server is away (client-go doubles the wait up
    to 30 s per failure, and the backoff resets only after minutes of health), so for a
    while after a restart a new namespace gets no default ServiceAccount: the next
    test's namespace waited 30 s in vain in a CI run; measured 0.8 s, 10.7 s and 58.3 s
    after three restarts in three minutes. A probe namespace that gets its
    ServiceAccount says they are back.
    """
    name = f"devstack-probe-{os.getpid()}-{int(time.monotonic() * 1000)}"
    api = stack.api
    t0 = time.monotonic()
    deadline = t0 + timeout
    try:
        api.call("POST", "/api/v1/namespaces",
                 {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        while api.get_or_none(f"/api/v1/namespaces/{name}/serviceaccounts/default") is None:
            if time.monotonic() >= deadline:
                _log(f"the controller-manager made no ServiceAccount in {timeout:.0f}s after the restart")
                break
            time.sleep(0.2)
        else:
            _log(f"the controller-manager made a ServiceAccount {time.monotonic() - t0:.1f}s "
                 "after the API server was ready")
    except Exception as e:  # the stack's own check: report, let the caller's test judge
        _log(f"could not probe the controller-manager after the restart: {e}")
    finally:
        try:
            api.delete(f"/api/v1/namespaces/{name}")
        except Exception as e:  # a probe namespace left behind harms no test
            _log(f"could not delete the probe namespace {name}: {e}")
