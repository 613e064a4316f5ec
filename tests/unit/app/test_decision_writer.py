"""The decision log's writer thread: the event loop never waits on a log write, lines stay
whole and in order, and a reader that stops costs dropped lines, counted, not memory."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import threading
from collections.abc import Iterator

import orjson
import pytest

import raykueue.app.logs as logs
from raykueue.app.logs import DecisionLog, LineWriter
from tests.unit.app.test_logs import read_lines


@pytest.fixture
def full_pipe() -> Iterator[tuple[int, int, bytes]]:
    """A pipe whose buffer is full, so that the next write to it blocks until the test
    reads; yields (read end, write end, the filler bytes)."""
    read, write = os.pipe()
    fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, 4096)
    os.set_blocking(write, False)
    filler = b""
    try:
        while True:
            filler += b"f" * os.write(write, b"f" * 512)
    except BlockingIOError:
        pass
    os.set_blocking(write, True)
    try:
        yield read, write, filler
    finally:
        os.close(read)
        os.close(write)


def read_exactly(fd: int, size: int) -> bytes:
    data = b""
    while len(data) < size:
        data += os.read(fd, size - len(data))
    return data


def write_entered(monkeypatch: pytest.MonkeyPatch, fd: int) -> threading.Event:
    """Set once a write to `fd` begins (os.write spied on for the test)."""
    entered = threading.Event()
    real_write = os.write

    def spy(to: int, data: bytes) -> int:
        if to == fd:
            entered.set()
        return real_write(to, data)

    monkeypatch.setattr(os, "write", spy)
    return entered


def test_the_loop_goes_on_while_the_log_write_is_blocked(
        full_pipe: tuple[int, int, bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the pass-end flush wrote on the loop, and a write that blocked (a full pipe,
    a busy disk) held every review in flight on the loop as long."""
    read, write, filler = full_pipe
    name = "raykueue.test-blocked"
    logging.getLogger(name).setLevel(logging.INFO)
    decisions = DecisionLog(name, fd=write, writer=LineWriter(name))
    entered = write_entered(monkeypatch, write)
    passes_while_blocked: list[int] = []

    async def serve() -> None:
        decisions.emit("gated", {"i": 0})
        await asyncio.sleep(0)  # the flush hands pass 1's line over
        # Wait off the loop for the writer to be inside its write (the pipe is full).
        assert await asyncio.to_thread(entered.wait, 10)
        for i in range(1, 4):
            decisions.emit("gated", {"i": i})
            await asyncio.sleep(0)
            passes_while_blocked.append(i)

    loop_thread = threading.Thread(target=asyncio.run, args=(serve(),))
    loop_thread.start()
    loop_thread.join(timeout=10)
    blocked = loop_thread.is_alive()
    assert read_exactly(read, len(filler)) == filler  # lets a blocked write go on
    loop_thread.join()
    assert not blocked, "the event loop waited on the log write"
    assert passes_while_blocked == [1, 2, 3]
    lines = read_lines(read, 4)
    assert [orjson.loads(line)["i"] for line in lines] == [0, 1, 2, 3]


def test_lines_past_the_bound_are_dropped_counted_and_said(
        full_pipe: tuple[int, int, bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    read, write, filler = full_pipe
    monkeypatch.setattr(logs, "_MAX_HELD_LINES", 3)
    entered = write_entered(monkeypatch, write)
    writer = LineWriter("raykueue.test-bound")
    writer.hand_over(write, [b'{"i":0}\n'])
    assert entered.wait(10)  # the writer took line 0 and is blocked on the full pipe
    writer.hand_over(write, [b'{"i":1}\n', b'{"i":2}\n'])  # three lines held: the bound
    writer.hand_over(write, [b'{"i":3}\n', b'{"i":4}\n'])
    writer.hand_over(write, [b'{"i":5}\n'])
    assert writer.dropped == 3
    assert read_exactly(read, len(filler)) == filler
    lines = [orjson.loads(line) for line in read_lines(read, 4)]
    assert [line.get("i") for line in lines[:3]] == [0, 1, 2]
    assert lines[3]["level"] == "warning" and lines[3]["dropped"] == 3
    assert lines[3]["logger"] == "raykueue.test-bound"
    assert writer.dropped == 0


def test_close_writes_every_line_held_in_order_then_writes_at_once() -> None:
    """The writer is a daemon thread: at exit `close` (registered with atexit) is what
    keeps a stopping server from cutting the lines it still holds."""
    read, write = os.pipe()
    try:
        writer = LineWriter("raykueue.test-close")
        lines = [f"{i:04d}\n".encode() for i in range(300)]
        for i in range(0, 300, 3):
            writer.hand_over(write, lines[i:i + 3])
        writer.close()
        assert writer._thread is not None and not writer._thread.is_alive()
        writer.hand_over(write, [b"after\n"])  # closed: written at once, on this thread
        os.close(write)
        write = -1
        out = b""
        while chunk := os.read(read, 65536):
            out += chunk
        assert out == b"".join(lines) + b"after\n"
    finally:
        os.close(read)
        if write != -1:
            os.close(write)
