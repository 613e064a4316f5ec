"""Startup failures as one line that names what to change, not a traceback.

What a CrashLoopBackOff shows is the last lines a process wrote; a 20-line
traceback there names pydantic's field or OpenSSL's error, not the environment
variable, flag or file the user set. Every failure raykueue can foresee at
startup is raised as `StartupError` (its text: what is wrong, then "fix: ...")
and reported by the CLI as one line.
"""

from __future__ import annotations

import socket
from collections.abc import Collection, Mapping
from typing import Any

from pydantic import ValidationError


class StartupError(Exception):
    """raykueue cannot start; the message names the setting or file and the fix."""


def setting_name(field: str, flags: Collection[str]) -> str:
    """How the user set `field`: the flag when one was given, else the variable."""
    if field in flags:
        return "--" + field.replace("_", "-")
    return "RAYKUEUE_" + field.upper()


def settings_error(exc: ValidationError, flags: Mapping[str, Any]) -> StartupError:
    """A ValidationError of Settings as one line per setting, joined with '; '."""
    parts = []
    for error in exc.errors(include_url=False):
        loc = [str(p) for p in error.get("loc", ()) if not isinstance(p, int)]
        message = str(error.get("msg", "invalid"))
        # pydantic prefixes a validator's own ValueError; ours already name the variables.
        message = message.removeprefix("Value error, ")
        if not loc:
            parts.append(message)
            continue
        name = setting_name(loc[0], flags)
        given = error.get("input")
        shown = f"{name}={given}" if name.startswith("RAYKUEUE_") else f"{name} {given}"
        parts.append(f"{shown}: {message}")
    return StartupError("invalid setting: " + "; ".join(parts)
                        + " (fix: give it a valid value, or unset it for the default)")


def bind(host: str, port: int, flags: Collection[str] = ()) -> socket.socket:
    """The listening address, bound before anything says it is served.

    uvicorn binds inside `run()`, after raykueue has logged where it serves, and
    on failure logs the bare OSError and exits; binding here first makes a taken
    port the one line that names the setting.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    # As uvicorn does: a restart is not refused for the old socket's TIME_WAIT.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise StartupError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc} (fix: stop whatever "
            f"listens there, or choose another port with {setting_name('port', flags)}; for "
            f"another address, {setting_name('host', flags)})") from exc
    return sock
