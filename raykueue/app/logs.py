"""One JSON object per log line, so a cluster's log pipeline can index decisions."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import time
from typing import Any

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


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": _timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = record.__dict__.get("fields")
        if isinstance(fields, dict):
            # The hot path (one line per admission) passes its fields as one dict.
            entry.update(fields)
        else:
            for key, value in record.__dict__.items():
                if key not in _STANDARD and not key.startswith("_"):
                    entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


def configured() -> bool:
    """Whether `configure` set up the JSON handler (a failure is then reported as a JSON line)."""
    return any(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers)


def configure(level: str) -> None:
    # The logging HOWTO's documented savings: no caller lookup (a stack walk
    # per record), no thread or process names. An admission decision is tens
    # of microseconds; these would double it.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
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
        entry = {"time": _timestamp(time.time()), "level": "info", "logger": self.logger.name,
                 "msg": msg, **fields}
        # A closed or full stderr must not fail an admission.
        with contextlib.suppress(OSError):
            os.write(self.fd, orjson.dumps(entry, default=str, option=orjson.OPT_APPEND_NEWLINE))
