"""The worker runtime: what one child process does between claim and outcome.

One ``Worker`` serves one queue. Its main loop (the thread that calls :meth:`Worker.run`) is the
only thread that claims, renews and records outcomes; handlers run on ``concurrency`` daemon
threads (``async def`` handlers on one event loop thread) and hand their outcomes back through a
queue. No transaction is ever open while a handler runs.

Built before a fork, started after it: ``__init__`` opens nothing; ``run()`` creates the engine,
the threads and the listener in the process that runs it.

Its parts, one concern a module:

- :mod:`.loop`: the ``Worker`` itself, a coordinator: the passes, the waits between them, the drain;
- :mod:`.claims`: when to claim, how many, and handing claimed jobs to the handler threads;
- :mod:`.executor`: the handler threads and the event loop for ``async def`` handlers;
- :mod:`.inflight`: a claimed job and the one state machine it goes through;
- :mod:`.outcomes`: batched outcome writes, fenced on each lease, and dead-job reports;
- :mod:`.leases`: registration in the workers registry, lease renewal, lost leases;
- :mod:`.timeouts`: task timeouts, and the recycle of a process whose handler ignores one;
- :mod:`.session`: the engine, the main loop's connection, its time limits and backoff;
- :mod:`.listener`: the LISTEN connection that wakes an idle loop.
"""

from __future__ import annotations

from .listener import Listener
from .loop import Worker
from .session import (
    DATABASE_ERRORS,
    IDLE_IN_TRANSACTION_TIMEOUT,
    LOCK_TIMEOUT,
    STATEMENT_TIMEOUT,
    session_limits,
)

__all__ = [
    "DATABASE_ERRORS",
    "IDLE_IN_TRANSACTION_TIMEOUT",
    "LOCK_TIMEOUT",
    "STATEMENT_TIMEOUT",
    "Listener",
    "Worker",
    "session_limits",
]
