"""Log lines: one JSON object per line in a pod, so a cluster's log pipeline can
index decisions; `key=value` text on a terminal, for a person
(RAYKUEUE_LOG_FORMAT=auto|json|text, auto = text when stderr is a TTY)."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import time
from typing import Any, Literal

import orjson

# Attributes every LogRecord has; anything else came in through `extra=`.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "color_message",  # uvicorn's ANSI-coloured duplicate of msg
}


# Formatting the second once per second, not once per line. Lines come from
# every thread (the event loop, watches, workers): lru_cache is safe to share,
# where a hand-kept [second, text] pair could be read half-updated.
@functools.lru_cache(maxsize=4)
def _second(second: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))


def _timestamp(created: float) -> str:
    second = int(created)
    return f"{_second(second)}.{int((created - second) * 1000):03d}Z"


Format = Literal["auto", "json", "text"]
# Set by `configure`; DecisionLog, which bypasses the handlers, follows it.
_text = False


def resolve(fmt: str, stream: Any) -> Literal["json", "text"]:
    """`auto` is text for a person at a terminal and JSON for a log pipeline
    (a pod's stderr is a pipe or file, never a TTY)."""
    if fmt == "auto":
        isatty = getattr(stream, "isatty", None)
        return "text" if callable(isatty) and isatty() else "json"
    if fmt not in ("json", "text"):
        raise ValueError(f"log format {fmt!r}: auto, json or text")
    return fmt  # type: ignore[return-value]


def _extra(record: logging.LogRecord) -> dict[str, object]:
    fields = record.__dict__.get("fields")
    if isinstance(fields, dict):
        # The hot path (one line per admission) passes its fields as one dict.
        return fields
    return {key: value for key, value in record.__dict__.items()
            if key not in _STANDARD and not key.startswith("_")}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": _timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(_extra(record))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


def _text_line(created: float, level: str, logger: str, msg: str,
               fields: dict[str, object]) -> str:
    # Time of day only: a person reading a terminal knows the date.
    pairs = "".join(f" {key}={_value(value)}" for key, value in fields.items())
    return f"{_timestamp(created)[11:]} {level.upper():<7} {logger}: {msg}{pairs}"


def _value(value: object) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
    # Quoted only when needed, so `pod=team-a/head` stays greppable as written.
    return orjson.dumps(text).decode() if not text or any(ch in text for ch in ' "=\n') else text


class TextFormatter(logging.Formatter):
    """`HH:MM:SS.mmmZ LEVEL logger: message key=value ...`, the JSON line's content."""

    def format(self, record: logging.LogRecord) -> str:
        line = _text_line(record.created, record.levelname, record.name, record.getMessage(),
                          _extra(record))
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configured() -> bool:
    """Whether `configure` set up raykueue's handler (a failure is then reported as a log
    line, JSON or text as configured)."""
    return any(isinstance(h.formatter, (JsonFormatter, TextFormatter))
               for h in logging.getLogger().handlers)


def configure(level: str, fmt: str = "auto") -> None:
    # The logging HOWTO's documented savings: no caller lookup (a stack walk
    # per record), no thread or process names. An admission decision is tens
    # of microseconds; these would double it.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    global _text
    _text = resolve(fmt, sys.stderr) == "text"
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TextFormatter() if _text else JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # uvicorn's access log repeats what the decision line says, per request.
    logging.getLogger("uvicorn.access").disabled = True
    # The kubernetes client logs request bodies at DEBUG; keep tokens out of logs.
    logging.getLogger("kubernetes").setLevel(max(logging.INFO, root.level))
    logging.getLogger("urllib3").setLevel(max(logging.INFO, root.level))


class DecisionLog:
    """The one-line-per-admission log, written without the logging machinery.

    Same JSON shape as JsonFormatter's lines and the same logger name and
    level switch, but about ten times cheaper: with LogRecord creation, handler
    locks and formatting, `logging` cost a fifth of the CPU of a whole review
    in bench/admission.py. One os.write per line keeps each line whole
    (lines are far below PIPE_BUF) and in order with the handler's writes.
    """

    def __init__(self, name: str = "raykueue.admission", fd: int = 2) -> None:
        self.logger = logging.getLogger(name)
        self.fd = fd

    def emit(self, msg: str, fields: dict[str, Any]) -> None:
        if not self.logger.isEnabledFor(logging.INFO):
            return
        if _text:
            line = (_text_line(time.time(), "info", self.logger.name, msg, fields) + "\n").encode()
        else:
            entry = {"time": _timestamp(time.time()), "level": "info", "logger": self.logger.name,
                     "msg": msg, **fields}
            line = orjson.dumps(entry, default=str, option=orjson.OPT_APPEND_NEWLINE)
        # A closed or full stderr must not fail an admission.
        with contextlib.suppress(OSError):
            os.write(self.fd, line)
