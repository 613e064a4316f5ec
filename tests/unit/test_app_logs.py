"""The JSON log lines: their time, and that threads share the formatting cache safely."""

from __future__ import annotations

import calendar
import logging
import threading

import orjson
import pytest

from raykueue.app.logs import JsonFormatter, _timestamp

pytestmark = pytest.mark.unit

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
