"""Log lines: one JSON object per line in a pod, so a cluster's log pipeline can
index decisions; `key=value` text on a terminal, for a person
(RAYKUEUE_LOG_FORMAT=auto|json|text, auto = text when stderr is a TTY)."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import logging
import os
import sys
import threading
import time
from queue import SimpleQueue
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


# A pipe write of at most this many bytes is never interleaved with another
# writer's (POSIX PIPE_BUF; Linux's is 4096): a batch of lines is cut to fit.
_ATOMIC_WRITE = 4096
# Lines the writer may hold, not yet written, before new ones are dropped (~450 bytes
# each: ~9 MB), where a log reader that stopped would otherwise grow the heap without
# end. A writer that keeps up holds one pause's lines (400 at 8,000 reviews a second);
# this is over two seconds of a replica's fastest admissions, for a disk or a pipe's
# reader that stalls that long.
_MAX_HELD_LINES = 20_000
# After each write the writer pauses this long before taking more: it then takes a
# pause's lines at a time, and each wake of it takes the GIL from the event loop (a
# forced switch on a busy loop; on one core, two context switches). A wake per pass
# was 12% of the loop's time in py-spy on a loaded machine; a 5 ms pause cost 4-7 us
# a review more than 50 ms in bench/admission.py. Lines wait at most this long.
_WRITER_PAUSE_SECONDS = 0.05
# Handed over by `close`: the writer ends after the lines before it.
_CLOSE = -1


def write_lines(fd: int, lines: list[bytes]) -> None:
    """Whole lines in order, each os.write at most PIPE_BUF bytes where lines allow
    (a longer line alone), so that no line is split by another writer's write."""
    batch: list[bytes] = []
    size = 0
    for line in lines:
        if batch and size + len(line) > _ATOMIC_WRITE:
            _write_whole(fd, b"".join(batch))
            batch, size = [], 0
        batch.append(line)
        size += len(line)
    if batch:
        _write_whole(fd, batch[0] if len(batch) == 1 else b"".join(batch))


def _write_whole(fd: int, data: bytes) -> None:
    # A closed or full stderr must not fail an admission: what cannot be written is dropped.
    with contextlib.suppress(OSError):
        while data:
            data = data[os.write(fd, data):]


class LineWriter:
    """A thread that writes the lines handed to it, in the order handed over.

    The event loop hands over and goes on: a write to a file can block for
    milliseconds (a journal commit, dirty-page throttling: up to 15 ms on a busy
    disk in bench/admission.py) and one to a pipe whenever its reader lags, and
    every review in flight on the loop waited as long. os.write releases the GIL,
    so the loop runs while the writer waits. If the writer holds _MAX_HELD_LINES
    lines not yet written, further lines are dropped and counted, and a warning line
    says how many once it catches up. A stopped server loses no
    line: at interpreter exit `close` lets the writer finish what it holds, in order
    (tests/serve/test_decision_log.py), however far behind it is.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: SimpleQueue[tuple[int, list[bytes]]] = SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._held = 0  # lines handed over, not yet written (under _lock)
        self.dropped = 0

    def hand_over(self, fd: int, lines: list[bytes]) -> None:
        if self._closed:
            write_lines(fd, lines)
            return
        if self._thread is None:
            self._start()
        with self._lock:
            if self._held + len(lines) > _MAX_HELD_LINES:
                self.dropped += len(lines)
                return
            self._held += len(lines)
        self._queue.put((fd, lines))

    def _write(self, fd: int, lines: list[bytes]) -> None:
        write_lines(fd, lines)
        with self._lock:
            self._held -= len(lines)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                thread = threading.Thread(target=self._run, name=f"{self.name} writer",
                                          daemon=True)
                thread.start()
                self._thread = thread
                atexit.register(self.close)

    def close(self, timeout: float = 5.0) -> None:
        """Write every line held, in order, then stop; later lines are written at once.
        Registered at exit: the thread is a daemon, which the interpreter would cut short."""
        self._closed = True
        thread = self._thread
        if thread is not None and thread.is_alive():
            self._queue.put((_CLOSE, []))
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            fd, lines = self._queue.get()
            # What else was handed over meanwhile goes out in the same writes.
            while fd != _CLOSE and not self._queue.empty():
                more_fd, more = self._queue.get()
                if more_fd == fd:
                    lines.extend(more)  # a list handed over is the writer's own
                else:
                    self._write(fd, lines)
                    fd, lines = more_fd, more
            if fd == _CLOSE:
                return
            self._write(fd, lines)
            if self.dropped and self._queue.empty():  # caught up: after the lines held
                with self._lock:
                    dropped, self.dropped = self.dropped, 0
                write_lines(fd, [orjson.dumps(
                    {"time": _timestamp(time.time()), "level": "warning", "logger": self.name,
                     "msg": "decision lines dropped: the log's reader fell behind",
                     "dropped": dropped}, option=orjson.OPT_APPEND_NEWLINE)])
            time.sleep(_WRITER_PAUSE_SECONDS)


class DecisionLog:
    """The one-line-per-admission log, written without the logging machinery.

    Same JSON shape as JsonFormatter's lines and the same logger name and
    level switch, but about ten times cheaper: with LogRecord creation, handler
    locks and formatting, `logging` cost a fifth of the CPU of a whole review
    in bench/admission.py.

    Inside an event loop the lines of one loop pass are handed together, soon
    after it (`loop.call_soon`), to a LineWriter thread: one write system call per
    review cost more than the rest of the line, and the loop must not wait on the
    write at all (see LineWriter). Each os.write holds whole lines only, at most
    PIPE_BUF bytes where lines allow, so a line is never split by another
    thread's write. Without a running loop (a thread, a test) a line is written
    at once.
    """

    def __init__(self, name: str = "raykueue.admission", fd: int = 2,
                 writer: LineWriter | None = None) -> None:
        self.logger = logging.getLogger(name)
        self.fd = fd
        self.writer = writer or _writer(name)
        self._pending: list[bytes] = []
        # (millisecond, message, the line's opening): one tuple, replaced whole, so that
        # a thread never reads one line's time with another's opening.
        self._head: tuple[int, str, bytes] = (-1, "", b"")

    def emit(self, msg: str, fields: dict[str, Any]) -> None:
        if not self.logger.isEnabledFor(logging.INFO):
            return
        if _text:
            line = (_text_line(time.time(), "info", self.logger.name, msg, fields) + "\n").encode()
        else:
            line = self._json_line(msg, fields)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            write_lines(self.fd, [line])
            return
        if not self._pending:
            loop.call_soon(self.flush)
        self._pending.append(line)

    def _json_line(self, msg: str, fields: dict[str, Any]) -> bytes:
        """The JSON line of `{"time", "level", "logger", "msg", **fields}` (field names other
        than those four), spliced from two encodings: the opening is made once per
        millisecond and message, the fields are encoded as they are, never copied into
        a second dict. Merging and stamping each line cost as much as encoding it."""
        now = time.time()
        second = int(now)
        stamp = second * 1000 + int((now - second) * 1000)
        at, said, head = self._head
        if stamp != at or msg != said:
            head = orjson.dumps({"time": _timestamp(now), "level": "info",
                                 "logger": self.logger.name, "msg": msg})[:-1]
            self._head = (stamp, msg, head)
        if not fields:
            return head + b"}\n"
        return head + b"," + orjson.dumps(fields, default=str, option=orjson.OPT_APPEND_NEWLINE)[1:]

    def flush(self) -> None:
        """Hand the lines held since the last flush to the writer (the event loop calls it
        after each pass)."""
        pending, self._pending = self._pending, []
        if pending:
            self.writer.hand_over(self.fd, pending)


# One writer thread per logger name: the admission endpoints share theirs.
_writer = functools.cache(LineWriter)
