"""One JSON object per log line, so a cluster's log pipeline can index decisions."""

from __future__ import annotations

import logging
import sys
import time

import orjson

# Attributes every LogRecord has; anything else came in through `extra=`.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "color_message",  # uvicorn's ANSI-coloured duplicate of msg
}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
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
