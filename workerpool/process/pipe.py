"""The child↔parent pipe: what a child tells the supervisor, as named messages.

Each child (and the releaser) gets the write end of a pipe at its fork; the parent reads the
other end without blocking. One message a line, in the child's order:

- :class:`Started` (``w <worker id>``): first, before any claim: the lease owner name of this
  process, so the parent can release its claims should it die;
- :class:`Tick` (``t``): a loop pass reached the database (the heartbeat, at most every 0.25 s);
- :class:`Claimed` (``j``): once, when the worker claimed its first job: it made progress, so
  its death is not a boot failure and its restart is not backed off;
- :class:`Released` (``r <rows>``): the releaser's report of what it released.

:func:`send` writes one without ever blocking the child (a full pipe drops a tick; a closed one
means the parent is gone); :func:`read` and :func:`close` are the parent's end. Standard
library only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Started:
    worker_id: str


@dataclass(frozen=True)
class Tick:
    pass


@dataclass(frozen=True)
class Claimed:
    pass


@dataclass(frozen=True)
class Released:
    rows: int


Message = Started | Tick | Claimed | Released
TICK, CLAIMED = Tick(), Claimed()


def encode(message: Message) -> bytes:
    match message:
        case Started(worker_id):
            return f"w {worker_id}\n".encode()
        case Tick():
            return b"t\n"
        case Claimed():
            return b"j\n"
        case Released(rows):
            return f"r {rows}\n".encode()
    raise TypeError(f"not a pipe message: {message!r}")


def decode(line: str) -> Message | None:
    """The message of one line; None for a line that is none (ignored, as before)."""
    if line.startswith("w "):
        return Started(line[2:].strip())
    if line == "t":
        return TICK
    if line == "j":
        return CLAIMED
    if line.startswith("r ") and line[2:].strip().isdecimal():
        return Released(int(line[2:]))
    return None


def send(fd: int, message: Message) -> None:
    """Write one message to the parent; never blocks, never raises for a full or closed pipe."""
    try:
        os.write(fd, encode(message))
    except OSError:  # BlockingIOError, BrokenPipeError
        pass  # a full pipe drops a tick; a closed one means the parent is gone


# -- the parent's end ---------------------------------------------------------------------------


class Reporter(Protocol):
    """The parent's end of one child's report pipe (a slot, the releaser)."""

    fd: int | None
    buffer: bytes


def _read_lines(os_layer: Any, reporter: Reporter) -> list[str]:
    """The complete lines the pipe holds now. At end of file the fd is closed and set to None
    (the child is exiting: the reap step decides what that means)."""
    assert reporter.fd is not None
    data = os_layer.read(reporter.fd)
    if data is None:
        return []
    if data == b"":
        os_layer.close(reporter.fd)
        reporter.fd = None
        return []
    *lines, reporter.buffer = (reporter.buffer + data).split(b"\n")
    return [line.decode("utf-8", "replace") for line in lines]


def close(os_layer: Any, reporter: Reporter) -> list[Message]:
    """A child was reaped: its last words (its ``Started`` may still be in the pipe), then
    close."""
    if reporter.fd is None:
        return []
    lines = _read_lines(os_layer, reporter)
    if reporter.fd is not None:
        os_layer.close(reporter.fd)
        reporter.fd = None
    return _decoded(lines)


def read(os_layer: Any, reporter: Reporter) -> list[Message]:
    """The complete messages the pipe holds now (see :func:`_read_lines`)."""
    return _decoded(_read_lines(os_layer, reporter))


def _decoded(lines: list[str]) -> list[Message]:
    return [message for message in map(decode, lines) if message is not None]
