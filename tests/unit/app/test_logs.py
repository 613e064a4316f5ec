"""The JSON log lines: their time, and that threads share the formatting cache safely."""

from __future__ import annotations

import asyncio
import calendar
import logging
import os
import select
import threading
import time

import orjson
import pytest

from raykueue.app.logs import (
    DecisionLog,
    JsonFormatter,
    LineWriter,
    TextFormatter,
    _timestamp,
    configure,
    resolve,
)
from raykueue.app.settings import Settings

T = calendar.timegm((2026, 12, 4, 5, 6, 7))


def test_timestamps_are_utc_with_milliseconds() -> None:
    assert _timestamp(T + 0.25) == "2026-12-04T05:06:07.250Z"
    assert _timestamp(T + 1.5) == "2026-12-04T05:06:08.500Z"
    assert _timestamp(T + 0.125) == "2026-12-04T05:06:07.125Z"


def test_threads_alternating_seconds_each_get_their_own() -> None:
    """Before: a [second, text] default argument shared by all threads, written
    in two steps, could pair one thread's second with another's text."""
    wrong: list[str] = []

    def run(second: int) -> None:
        expected = f"2026-12-04T05:06:{7 + second:02d}.000Z"
        for _ in range(20_000):
            got = _timestamp(T + second)
            if got != expected:
                wrong.append(got)

    threads = [threading.Thread(target=run, args=(i % 3,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []


def test_a_record_is_one_json_object_with_its_extra_fields() -> None:
    record = logging.LogRecord("raykueue.x", logging.INFO, "", 0, "hello %s", ("you",), None)
    record.created = T
    record.pod = "team-a/head"
    entry = orjson.loads(JsonFormatter().format(record))
    assert entry == {"time": "2026-12-04T05:06:07.000Z", "level": "info", "logger": "raykueue.x",
                     "msg": "hello you", "pod": "team-a/head"}


class _Stream:
    def __init__(self, tty: bool) -> None:
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_auto_is_text_at_a_terminal_and_json_in_a_pod() -> None:
    assert resolve("auto", _Stream(tty=True)) == "text"
    assert resolve("auto", _Stream(tty=False)) == "json"  # a pod's stderr is a pipe
    assert resolve("json", _Stream(tty=True)) == "json"
    assert resolve("text", _Stream(tty=False)) == "text"
    with pytest.raises(ValueError, match="auto, json or text"):
        resolve("yaml", _Stream(tty=True))


def test_a_text_line_says_what_the_json_line_says() -> None:
    record = logging.LogRecord("raykueue.x", logging.WARNING, "", 0, "hello %s", ("you",), None)
    record.created = T + 0.5
    record.pod = "team-a/head"
    record.why = "no queue label"
    assert TextFormatter().format(record) == (
        '05:06:07.500Z WARNING raykueue.x: hello you pod=team-a/head why="no queue label"')


def test_the_setting_picks_the_formatter_and_the_decision_line_follows(
        monkeypatch: pytest.MonkeyPatch) -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    read, write = os.pipe()
    try:
        monkeypatch.setenv("RAYKUEUE_LOG_FORMAT", "text")
        configure("INFO", Settings().log_format)
        assert isinstance(root.handlers[0].formatter, TextFormatter)
        DecisionLog(fd=write).emit("gated", {"pod": "team-a/w", "decision": "gated"})
        line = os.read(read, 4096).decode()
        assert line.endswith(" INFO    raykueue.admission: gated pod=team-a/w decision=gated\n")
        configure("INFO", "json")
        assert isinstance(root.handlers[0].formatter, JsonFormatter)
        DecisionLog(fd=write).emit("gated", {"pod": "team-a/w"})
        assert orjson.loads(os.read(read, 4096))["pod"] == "team-a/w"
    finally:
        os.close(read)
        os.close(write)
        root.handlers[:], level = saved
        root.setLevel(level)
        configure_format_reset()


def test_in_an_event_loop_a_pass_s_lines_go_out_together_whole_and_in_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass's lines are handed to the writer thread together, not written on the loop;
    each write whole lines of at most PIPE_BUF bytes (a longer line alone), so no line is
    split by another thread's write."""
    writes: list[tuple[bytes, threading.Thread]] = []
    real_write = os.write

    def spy(fd: int, data: bytes) -> int:
        writes.append((bytes(data), threading.current_thread()))
        return real_write(fd, data)

    read, write = os.pipe()
    name = "raykueue.test-batch"
    logging.getLogger(name).setLevel(logging.INFO)
    decisions = DecisionLog(name, fd=write, writer=LineWriter(name))
    monkeypatch.setattr(os, "write", spy)

    async def one_pass() -> None:
        for i in range(30):
            decisions.emit("gated", {"i": i, "pad": "x" * 200})
        decisions.emit("gated", {"i": 30, "pad": "y" * 5000})
        assert decisions._pending and writes == []
        await asyncio.sleep(0)  # the loop runs the flush it was handed

    try:
        asyncio.run(one_pass())
        lines = read_lines(read, 31)
        assert [orjson.loads(line)["i"] for line in lines] == list(range(31))
        assert 1 < len(writes) < 10
        assert all(len(w) <= 4096 or w.count(b"\n") == 1 for w, _ in writes)
        assert all(w.endswith(b"\n") for w, _ in writes)
        assert threading.main_thread() not in {thread for _, thread in writes}
    finally:
        os.close(read)
        os.close(write)


def read_lines(fd: int, count: int, timeout: float = 10.0) -> list[bytes]:
    """The first `count` lines read from `fd`, waiting for them up to `timeout` seconds."""
    data = b""
    deadline = time.monotonic() + timeout
    while (got := data.count(b"\n")) < count:
        left = deadline - time.monotonic()
        assert left > 0, f"{got} of {count} lines in {timeout} s"
        if select.select([fd], [], [], left)[0]:
            data += os.read(fd, 1 << 20)
    return data.splitlines()[:count]


def test_a_decision_line_is_the_merged_entry_encoded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spliced from a cached opening and the fields' own encoding, the line is byte for byte
    what encoding one merged dict gives, also when the millisecond or the message changes."""
    decisions = DecisionLog("raykueue.test-splice")
    fields = {"webhook": "mutate", "pod": "team-a/w", "gated": True, "latency_ms": 0.123,
              "queue": "", "priority": None, "note": 'say "hi"\n'}
    for now, msg, extra in ((T + 0.25, "gated", fields), (T + 0.2504, "gated", fields),
                            (T + 0.2514, "gated", fields), (T + 0.2514, "other", fields),
                            (T + 1.0, "gated", {})):
        monkeypatch.setattr(time, "time", lambda now=now: now)
        expected = orjson.dumps({"time": _timestamp(now), "level": "info",
                                 "logger": "raykueue.test-splice", "msg": msg, **extra},
                                option=orjson.OPT_APPEND_NEWLINE)
        assert decisions._json_line(msg, extra) == expected


def configure_format_reset() -> None:
    import raykueue.app.logs as logs

    logs._text = False
