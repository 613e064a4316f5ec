"""`<stack dir>/state.json`: the one record of what a stack is and what runs in it.

Every `Stack` reads it afresh and writes it whole (atomically), so two `Stack`
objects for one directory, in one process or several, never disagree.
Writers hold the directory's lock (`locked`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .procs import Proc, pid_alive

STATE_VERSION = 1


@dataclass
class State:
    tier: str | None = None
    # "manual" (started by hand, scripts/cluster up: stays up) or "session" (started
    # by a test session or a bench run: the last user's release stops it); the rule
    # is ownership.py's
    owner: str = "manual"
    # Which Kueue the stack runs (config.KUEUE_MODES); a state.json from before the
    # modes existed ran "minimal".
    kueue_mode: str = "minimal"
    started_at: float = field(default_factory=time.time)
    bin_dir: str | None = None
    etcd_data: str | None = None
    crds_digest: str | None = None
    crd_names: list[str] = field(default_factory=list)
    components: dict[str, Proc] = field(default_factory=dict)


def read(path: Path) -> State | None:
    """The recorded state, or None when there is none (or of another version)."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if raw.get("version") != STATE_VERSION:
        return None
    return State(
        tier=raw.get("tier"), owner=raw.get("owner", "manual"),
        kueue_mode=raw.get("kueue_mode", "minimal"),
        started_at=raw.get("started_at", 0.0), bin_dir=raw.get("bin_dir"),
        etcd_data=raw.get("etcd_data"), crds_digest=raw.get("crds_digest"),
        crd_names=raw.get("crd_names") or [],
        components={n: Proc(**p) for n, p in raw.get("components", {}).items()},
    )


def write(path: Path, state: State, derived: dict) -> None:
    """Write `state`; `derived` (server, ports, paths) is for people and other tools."""
    out = {
        "version": STATE_VERSION, **derived,
        "tier": state.tier, "owner": state.owner, "kueue_mode": state.kueue_mode,
        "started_at": state.started_at,
        "bin_dir": state.bin_dir, "etcd_data": state.etcd_data,
        "crds_digest": state.crds_digest, "crd_names": state.crd_names,
        "components": {n: p.__dict__ for n, p in state.components.items()},
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=2))
    os.replace(tmp, path)


@contextlib.contextmanager
def locked(stack_dir: Path) -> Iterator[None]:
    stack_dir.mkdir(parents=True, exist_ok=True)
    with open(stack_dir / "lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# ---- processes using a stack (test sessions, bench runs): one empty file per pid ----

def users_dir(stack_dir: Path) -> Path:
    return stack_dir / "users"


def add_user(stack_dir: Path, pid: int) -> None:
    users_dir(stack_dir).mkdir(parents=True, exist_ok=True)
    (users_dir(stack_dir) / str(pid)).touch()


def remove_user(stack_dir: Path, pid: int) -> None:
    (users_dir(stack_dir) / str(pid)).unlink(missing_ok=True)


def live_users(stack_dir: Path) -> list[int]:
    users = []
    d = users_dir(stack_dir)
    for f in d.glob("*") if d.exists() else []:
        try:
            pid = int(f.name)
        except ValueError:
            continue
        if pid_alive(pid):
            users.append(pid)
        else:
            f.unlink(missing_ok=True)
    return users
