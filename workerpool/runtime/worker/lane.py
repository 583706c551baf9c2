"""The thread a worker's pass transaction runs on while its main loop keeps handing out jobs.

A pass (the waiting outcomes written, then the claim, in one transaction) is round trips and
server time: 5-6 ms of 12 for a pass of 150 rows. On the main loop, the handler threads sat idle
through them, their buffer handed out and run in 2-3 ms (docs/benchmarks.md, "Where the time
goes"). When handlers are busy, the main loop gives the pass to this thread instead and goes on
collecting finished jobs, so the handlers run the rows already handed out while the next claim is
on the wire.

One pass at a time, on the main loop's own connection: while the lane holds it, the main loop
sends nothing to the database (no renewal, no cancel check, no other write) and claims nothing
else, so the database sees the same sequence of transactions as when the main loop sent them
itself. Everything the pass needs from the main loop's state is read before it is handed over,
and everything it changes in memory is changed by the main loop once it has landed.
"""

from __future__ import annotations

import queue as queue_module
import threading
from collections.abc import Callable
from typing import Any


class Lane:
    """One daemon thread running one call at a time; ``wake`` is set when a call has landed."""

    def __init__(self, name: str, wake: threading.Event) -> None:
        self.name = name
        self._wake = wake
        self._calls: queue_module.SimpleQueue[Callable[[], Any] | None] = queue_module.SimpleQueue()
        self._landed = threading.Event()
        self._result: tuple[Any, BaseException | None] = (None, None)
        self._thread: threading.Thread | None = None
        self.busy = False  # a call was submitted and its result not taken yet (main loop's)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
        self._thread.start()

    def submit(self, call: Callable[[], Any]) -> None:
        assert not self.busy, "one pass at a time"
        self.busy = True
        self._landed.clear()
        self._calls.put(call)

    @property
    def landed(self) -> bool:
        """The call submitted last has returned or raised (its result waits to be taken)."""
        return self.busy and self._landed.is_set()

    def take(self, timeout: float | None = None) -> Any:
        """The call's return value, waiting for it; what it raised is raised here."""
        if not self._landed.wait(timeout):
            raise TimeoutError(f"{self.name}: the pass did not land in {timeout} s")
        self.busy = False
        value, error = self._result
        self._result = (None, None)
        if error is not None:
            raise error
        return value

    def stop(self, timeout: float = 5.0) -> None:
        """Let the thread exit once its call (if any) returns; wait for it at most ``timeout``."""
        self._calls.put(None)
        if self._thread is not None:
            self._thread.join(timeout)

    def _serve(self) -> None:
        while (call := self._calls.get()) is not None:
            try:
                self._result = (call(), None)
            except BaseException as exc:  # the main loop handles it as the pass's own
                self._result = (None, exc)
            self._landed.set()
            self._wake.set()
