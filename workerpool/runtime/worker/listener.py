"""The LISTEN connection: notifications of new jobs wake an idle claim loop early; an operator's
cancel of a job this worker holds, or a pause of its queue, reaches it the same way."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg
from sqlalchemy.engine import URL

from ... import sql
from ...model import metrics
from ...model.errors import first_line
from ...sql import db
from .session import Reconnect

log = logging.getLogger("workerpool.worker")

LISTEN_SLICE = 0.25  # seconds the listener waits for notifications before checking for a stop


class Listener(threading.Thread):
    """A dedicated autocommit connection that LISTENs and wakes the claim loop.

    Notifications are hints: a lost one costs latency (the loop also polls), never a job. It
    reconnects with capped backoff, subscribes again, and wakes the loop after every reconnect
    (notifications sent meanwhile are lost). Not used behind PgBouncer transaction pooling:
    ``WorkerPool(notify=False)`` or ``pool.queue(..., notify=False)`` turn it off.
    """

    def __init__(
        self,
        url: URL,
        queue: str,
        wake: threading.Event,
        *,
        worker_id: str = "",
        on_cancel: Callable[[list[int]], None] | None = None,
        on_pause: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(name=f"wp-{queue}-listen", daemon=True)
        self.worker_id = worker_id
        self.on_cancel = on_cancel or (lambda ids: None)
        self.on_pause = on_pause or (lambda: None)
        self.url = url.set(drivername="postgresql")
        self.queue = queue
        self.wake = wake
        self.connected = threading.Event()
        self.reconnects = 0
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        retry = Reconnect()
        while not self._halt.is_set():
            try:
                self._listen(retry)
            except Exception as exc:  # any failure: reconnect, never die
                self.connected.clear()
                delay = retry.failed()
                log.info(
                    "listener disconnected (%s: %s); reconnecting in %.1fs",
                    type(exc).__name__,
                    first_line(exc),
                    delay,
                    extra={"event": "listener_reconnect", "queue": self.queue},
                )
                self.wake.set()  # poll now: notifications may have been lost meanwhile
                self._halt.wait(delay)

    def _connect_args(self) -> dict[str, Any]:
        args = dict(db.CONNECT_ARGS)
        if db.on_unix_socket(self.url):
            args.pop("tcp_user_timeout")  # unix socket: no TCP
        return args

    def _listen(self, retry: Reconnect) -> None:
        target = db.connect_kwargs(self.url)
        with psycopg.connect(
            autocommit=True,
            application_name=f"workerpool-listen:{self.queue}"[:63],
            **target,
            **self._connect_args(),
        ) as conn:
            conn.execute(sql.LISTEN)
            if retry.failures:
                self.reconnects += 1
            retry.succeeded()
            self.connected.set()
            self.wake.set()
            while not self._halt.is_set():
                for note in conn.notifies(timeout=LISTEN_SLICE):
                    if note.payload.startswith(sql.CONTROL):
                        self._control(note.payload[len(sql.CONTROL) :])
                    elif self.queue in note.payload.split(","):
                        metrics.record.woke(self.queue, "notify")
                        self.wake.set()

    def _control(self, payload: str) -> None:
        """``cancel OWNER ID,ID`` for this worker's jobs; ``pause Q`` / ``resume Q``."""
        verb, _, rest = payload.partition(" ")
        if verb == "cancel":
            owner, _, ids = rest.partition(" ")
            if owner != self.worker_id:
                return
            self.on_cancel([int(job_id) for job_id in ids.split(",") if job_id.isdigit()])
        elif verb in ("pause", "resume") and rest == self.queue:
            self.on_pause()
        else:
            return
        self.wake.set()
