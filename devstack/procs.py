"""Processes of a stack: start one in its own session, wait for it, stop it.

Nothing here knows what a component is; `components.py` says what to run and
`stack.py` records what runs in state.json.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


class StackError(RuntimeError):
    """A component would not start; the message says which and quotes its log."""


@dataclass
class Proc:
    """One process as state.json records it."""

    name: str
    pid: int
    binary: str
    log: str
    ports: dict[str, int] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)

    def alive(self) -> bool:
        return pid_runs(self.pid, self.binary)


# Children this Python process started, by pid: only their parent can reap them
# (a zombie would look alive to os.kill), whichever Stack object asks.
_children: dict[int, subprocess.Popen] = {}


def tail(path: Path, lines: int = 40) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode(errors="replace")
    except OSError as e:
        return f"(no log: {e})"
    return "\n".join(text.splitlines()[-lines:])


def free_ports(n: int) -> list[int]:
    """n distinct free loopback ports (held open together so none repeats)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False


def pid_runs(pid: int, binary: str) -> bool:
    """Guard against pid reuse: the pid must still run the binary we started."""
    if not pid_alive(pid):
        return False
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return True  # no /proc: trust the pid
    return os.path.basename(exe).startswith(os.path.basename(binary))


# devstack is not part of the product's wheel: the Python processes the stack
# starts (`python -m devstack.ray.dashboard_proxy`, the Ray tier's driver) find it,
# and whatever else the checkout holds, through the checkout's root.
CHECKOUT = Path(__file__).resolve().parents[1]


def with_checkout_on_path(env: dict[str, str]) -> dict[str, str]:
    """`env` with the checkout first on PYTHONPATH."""
    rest = env.get("PYTHONPATH")
    return {**env, "PYTHONPATH": f"{CHECKOUT}{os.pathsep}{rest}" if rest else str(CHECKOUT)}


def spawn(name: str, argv: list[str], log: Path, *, cwd: Path, ports: dict[str, int],
          env: dict[str, str] | None = None) -> Proc:
    """Start argv in its own session (so it outlives us), appending to `log`.

    A command run through `nsenter ... -- BINARY ...` (the real node's processes)
    becomes BINARY (nsenter execs it): that is what its pid runs, and what
    `Proc.alive` checks against pid reuse.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        out.write(f"\n==== {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(argv)}\n".encode())
        out.flush()
        popen = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            env=with_checkout_on_path({**os.environ, **(env or {})}), cwd=cwd, start_new_session=True,
        )
    _children[popen.pid] = popen
    binary = argv[argv.index("--") + 1] if os.path.basename(argv[0]) == "nsenter" else argv[0]
    return Proc(name=name, pid=popen.pid, binary=binary, log=str(log), ports=ports, argv=argv)


def exit_code(proc: Proc) -> int | None:
    """Exit code if the process has exited (-1 when it is not our child), else None."""
    popen = _children.get(proc.pid)
    if popen is not None:
        return popen.poll()
    return None if proc.alive() else -1


def wait_ready(proc: Proc, check: Callable[[], tuple[bool, str]], timeout: float) -> None:
    """Poll `check` until it passes; fail at once if the process exits."""
    deadline = time.monotonic() + timeout
    last = "not checked yet"
    interval = 0.1
    log = Path(proc.log)
    while True:
        code = exit_code(proc)
        if code is not None:
            raise StackError(f"{proc.name} exited with code {code} while starting; last lines of "
                             f"{log}:\n{tail(log)}")
        try:
            ok, last = check()
        except Exception as e:
            ok, last = False, f"{type(e).__name__}: {e}"
        if ok:
            return
        if time.monotonic() > deadline:
            raise StackError(f"{proc.name} not ready after {timeout:.0f}s (last check: {last[:500]}); "
                             f"last lines of {log}:\n{tail(log)}")
        time.sleep(interval)
        interval = min(interval * 1.5, 1.0)


def stop(proc: Proc, grace: float = 10.0) -> None:
    """SIGTERM the process group, SIGKILL after `grace` seconds; reap our own child."""
    popen = _children.pop(proc.pid, None)
    if proc.alive():
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while proc.alive() and time.monotonic() < deadline:
            if popen is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    popen.wait(timeout=0.1)
            else:
                time.sleep(0.1)
        if proc.alive():
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
    if popen is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=5)
