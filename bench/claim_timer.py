"""Timing the claims the worker children actually run, from inside them (the fleet figure).

``$BENCH_CLAIM_TIMES`` names a directory; ``bench.app`` then calls :func:`install` at import,
before the supervisor forks, so every child inherits it. It wraps the worker session's two
transaction shapes (``Session.transaction`` and ``Session.single_statement``) and
``queries.claim``. Each transaction a process runs appends one line to ``claims-<pid>`` in that
directory, with one ``O_APPEND`` write (children leave with ``os._exit``: nothing buffered would
survive)::

    <monotonic s at the end> <transaction ms> <rows claimed, or - without a claim> <claim ms>

The transaction time of a claim pass is what the worker waits for: BEGIN, the waiting outcomes,
the claim statement and COMMIT (or the one autocommit claim statement). Every line is also one
commit, so the lines count the children's commits per job. PostgreSQL's own view of the
statement (``pg_stat_statements``) is not loaded on the servers this runs against, and gives no
percentiles when it is.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

CLAIM_TIMES_ENV = "BENCH_CLAIM_TIMES"

_pass = threading.local()  # what the current transaction claimed (rows, statement ms)
_file: tuple[int, int] | None = None  # (pid, fd): opened after the fork, in the child
_directory = ""


@dataclass(frozen=True)
class Transaction:
    """One line of a ``claims-<pid>`` file."""

    at: float  # monotonic seconds at the transaction's end
    ms: float  # the whole transaction
    rows: int | None  # rows its claim returned; None: no claim in it
    claim_ms: float | None  # the claim statement alone


def install(directory: str) -> None:
    """Wrap the session's transactions and the claim (idempotent)."""
    global _directory
    from workerpool import sql as queries
    from workerpool.runtime.worker.session import Session

    if getattr(queries.claim, "bench_timed", False):
        return
    _directory = directory
    Session.transaction = _timed(Session.transaction)
    Session.single_statement = _timed(Session.single_statement)
    queries.claim = _timed_claim(queries.claim)


def _timed(original):
    @contextmanager
    def wrapper(self, *args, **kwargs) -> Iterator:
        _pass.claim = None
        started = time.perf_counter()
        with original(self, *args, **kwargs) as conn:
            yield conn
        elapsed = (time.perf_counter() - started) * 1000.0
        _write(elapsed, _pass.claim)
        _pass.claim = None

    return wrapper


def _timed_claim(original):
    def claim(*args, **kwargs):
        started = time.perf_counter()
        rows = original(*args, **kwargs)
        _pass.claim = (len(rows), (time.perf_counter() - started) * 1000.0)
        return rows

    claim.bench_timed = True
    return claim


def _write(ms: float, claim: tuple[int, float] | None) -> None:
    global _file
    if _file is None or _file[0] != os.getpid():
        path = os.path.join(_directory, f"claims-{os.getpid()}")
        _file = (os.getpid(), os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600))
    rows, claim_ms = ("-", "-") if claim is None else (str(claim[0]), f"{claim[1]:.4f}")
    os.write(_file[1], f"{time.monotonic()!r} {ms:.4f} {rows} {claim_ms}\n".encode())


def read(directory: Path, since: float, until: float) -> list[Transaction]:
    """Every transaction that ended within ``[since, until]``, from every process."""
    out = []
    for path in sorted(directory.glob("claims-*")):
        for line in path.read_text().splitlines():
            at, ms, rows, claim_ms = line.split()
            if since <= float(at) <= until:
                out.append(
                    Transaction(
                        float(at),
                        float(ms),
                        None if rows == "-" else int(rows),
                        None if claim_ms == "-" else float(claim_ms),
                    )
                )
    return out
