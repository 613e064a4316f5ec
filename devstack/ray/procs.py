"""Processes of the Ray tier: started in a session of their own, logged, stopped by pid.

Every process starts with `start_new_session`, so it and everything it forks
(raylet, GCS, agents, Ray workers) share a session id equal to its pid. That
id is how the tier stops a node (its own process group, never a pattern) and
how it proves that nothing it started outlives it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..procs import with_checkout_on_path
from ..stack import tail

RAY_ENV = {
    # Ray swaps 127.0.0.1 for the machine's routable address unless it believes
    # it runs on a laptop (ray_constants.ENABLE_RAY_CLUSTER false): then every
    # address it picks is the loopback one.
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "NO_PROXY": "127.0.0.1",
    "no_proxy": "127.0.0.1",
    # A raylet gives its node's agents 15 s to register, then aborts; on a busy
    # 2-core machine starting several nodes they need longer.
    "RAY_agent_register_timeout_ms": "120000",
}


class RayProcessError(RuntimeError):
    """A Ray process would not start or died; the message quotes its log."""


def python() -> str:
    """The interpreter with `ray` installed (the one running the tests)."""
    return sys.executable


def bin_dir() -> str:
    return str(Path(sys.executable).parent)


@dataclass
class RayProcess:
    name: str
    popen: subprocess.Popen
    log: Path
    started: float = field(default_factory=time.monotonic)
    stopping: float | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def exited(self) -> int | None:
        return self.popen.poll()

    def failure(self, what: str) -> RayProcessError:
        return RayProcessError(f"{self.name} {what}; last lines of {self.log}:\n{tail(self.log, 60)}")

    def terminate(self) -> None:
        """SIGTERM to the process group this process leads (its own pid)."""
        if self.stopping is None:
            self.stopping = time.monotonic()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGTERM)

    def reap(self, grace: float) -> bool:
        """After `terminate`: True once gone; SIGKILL to its group after `grace` s."""
        if self.exited() is not None and not session_members([self.pid]):
            return True
        if self.stopping is not None and time.monotonic() - self.stopping > grace:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        return False

    def stop(self, grace: float = 5.0) -> None:
        """Stop and wait: SIGTERM, then SIGKILL to the group after `grace` s (a Ray
        head drains for 30 s on SIGTERM; nothing here needs that)."""
        self.terminate()
        deadline = time.monotonic() + grace + 10
        while not self.reap(grace) and time.monotonic() < deadline:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=0.1)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=1)


def spawn(name: str, argv: list[str], log: Path, env: dict[str, str] | None = None,
          cwd: Path | None = None, pipes: bool = False) -> RayProcess:
    """Start `argv` in a new session, output to `log`; with `pipes`, stdin and
    stdout are text pipes to talk to it (stderr still goes to the log)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    path = f"{bin_dir()}{os.pathsep}{os.environ.get('PATH', '')}"  # `ray` itself runs `ray`
    with open(log, "ab") as out:
        out.write(f"\n==== {time.strftime('%H:%M:%S')} {' '.join(argv)}\n".encode())
        out.flush()
        popen = subprocess.Popen(
            argv, stdin=subprocess.PIPE if pipes else subprocess.DEVNULL,
            stdout=subprocess.PIPE if pipes else out, stderr=out, text=pipes,
            env=with_checkout_on_path({**os.environ, "PATH": path, **RAY_ENV, **(env or {})}),
            cwd=cwd, start_new_session=True)
    return RayProcess(name, popen, log)


# ---- what runs, and where it talks ------------------------------------------------------


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, session id) of a process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[3])


def session_members(sessions: Iterable[int]) -> list[int]:
    """Live (not zombie) processes in any of these sessions."""
    wanted = set(sessions)
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None and st[1] in wanted and st[0] not in ("Z", "X"):
                found.append(int(entry))
    return found


def describe(pids: Iterable[int]) -> list[str]:
    out = []
    for pid in pids:
        with contextlib.suppress(OSError):
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            out.append(f"{pid} {cmd[:160]}")
    return out


_LOOPBACK_HEX = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}
_ANY_HEX = {"00000000", "00000000000000000000000000000000"}
_LISTEN = "0A"


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    return inodes


def off_loopback(sessions: Iterable[int]) -> list[str]:
    """Internet sockets of these sessions' processes that are not loopback-only.

    Local address must be loopback; so must the peer, except for listening
    sockets and unconnected UDP (peer all zeros). One line per offending socket.
    """
    pids = session_members(sessions)
    owner = {inode: pid for pid in pids for inode in _socket_inodes(pid)}
    bad = []
    for table in ("tcp", "tcp6", "udp", "udp6"):
        try:
            lines = Path(f"/proc/self/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            inode = cols[9]
            if inode not in owner:
                continue
            local, remote, state = cols[1].split(":")[0], cols[2].split(":")[0], cols[3]
            peer_ok = remote in _LOOPBACK_HEX or (remote in _ANY_HEX and (
                state == _LISTEN or table.startswith("udp")))
            if local not in _LOOPBACK_HEX or not peer_ok:
                bad.append(f"{table} {cols[1]} -> {cols[2]} state {state} pid {owner[inode]}")
    return bad


def pss_bytes(pids: Iterable[int]) -> int:
    """Proportional set size of these processes together (shared pages split)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
                    break
    return total
