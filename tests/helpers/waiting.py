"""Wait for a condition with a deadline, instead of sleeping for a guessed time."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(
    predicate: Callable[[], object],
    timeout: float = 10.0,
    interval: float = 0.02,
    message: str = "condition",
) -> object:
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def wait_while_progressing(
    predicate: Callable[[], object],
    progress: Callable[[], object],
    stall: float = 30.0,
    interval: float = 0.2,
    message: Callable[[], str] = lambda: "condition",
) -> object:
    """Poll ``predicate`` for as long as ``progress()`` keeps changing; fail the test once it has
    not changed for ``stall`` seconds. For work whose length depends on the machine's load (a
    drain under a busy suite), where only a stall is a failure."""
    seen, deadline = progress(), time.monotonic() + stall
    while True:
        value = predicate()
        if value:
            return value
        now, current = time.monotonic(), progress()
        if current != seen:
            seen, deadline = current, now + stall
        elif now > deadline:
            raise AssertionError(f"no progress for {stall}s (at {seen!r}) waiting for {message()}")
        time.sleep(interval)
