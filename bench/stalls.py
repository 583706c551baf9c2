"""What the server was doing when a soak's probe claim stalled.

A thread samples, every :data:`WATCH_EVERY` seconds, what every process of the server waits on
(the bench's backends, and the checkpointer, the WAL writer, autovacuum: ``pg_stat_activity``
lists them all), keeping the last :data:`WATCH_KEEP` seconds; a probe claim slower than
:data:`SLOW_MS` copies what was kept into the run's ``<label>-stalls.csv``, so a spike in the
claim's p99 comes with the waits around it. Each soak sample also counts the checkpoints and the
jobs table's autovacuum runs so far (:func:`counters`).
"""

from __future__ import annotations

import csv
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

#: Seconds between two reads of the server's waits, and how many seconds of them are kept.
WATCH_EVERY = 0.1
WATCH_KEEP = 3.0
#: A probe claim this slow (milliseconds) is a stall: the waits around it are written out.
SLOW_MS = 100.0

_WAITS = """
SELECT extract(epoch FROM clock_timestamp())::float8, backend_type,
       coalesce(application_name, ''), coalesce(state, ''), coalesce(wait_event_type, ''),
       coalesce(wait_event, ''), left(regexp_replace(coalesce(query, ''), '\\s+', ' ', 'g'), 80)
FROM pg_stat_activity
WHERE pid <> pg_backend_pid() AND coalesce(state, '') <> 'idle'
  AND coalesce(wait_event, '') NOT LIKE '%%Main' AND coalesce(wait_event, '') <> 'ClientRead'
"""
#: PostgreSQL 17 moved the checkpoint counts to their own view.
_CHECKPOINTS = {
    True: "SELECT num_timed + num_requested FROM pg_stat_checkpointer",
    False: "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter",
}
_AUTOVACUUMS = (
    "SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0)::int"
    " FROM pg_stat_user_tables WHERE relname = 'workerpool_jobs'"
)

FIELDS = [
    "stall_t",
    "stall_ms",
    "seen_t",
    "backend_type",
    "application",
    "state",
    "wait_event_type",
    "wait_event",
    "query",
]


def counters(sql: Callable[[str], list[tuple]]) -> tuple[int, int]:
    """(checkpoints, autovacuum and autoanalyze runs of the jobs table) since the stats reset;
    ``sql`` runs a statement on the bench database."""
    modern = int(sql("SHOW server_version_num")[0][0]) >= 170000
    [(checkpoints,)] = sql(_CHECKPOINTS[modern])
    [(autovacuums,)] = sql(_AUTOVACUUMS)
    return int(checkpoints), int(autovacuums)


class StallWatch:
    """The thread that keeps the last seconds of waits, and the stalls it was asked to keep."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.kept: deque[tuple[Any, ...]] = deque()
        self.stalls: list[tuple[Any, ...]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stall-watch", daemon=True)

    def start(self) -> StallWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        with psycopg.connect(
            self.dsn, autocommit=True, application_name="bench stall watch"
        ) as conn:
            while not self._stop.wait(WATCH_EVERY):
                rows = conn.execute(_WAITS).fetchall()
                with self._lock:
                    self.kept.extend(rows)
                    horizon = time.time() - WATCH_KEEP
                    while self.kept and self.kept[0][0] < horizon:
                        self.kept.popleft()

    def probed(self, ms: float) -> None:
        """A probe claim took ``ms``: a stall keeps the waits seen around it."""
        if ms < SLOW_MS:
            return
        at = time.time()
        with self._lock:
            self.stalls.extend((round(at, 3), round(ms, 1), *row) for row in self.kept)
            if not self.kept:  # the watcher saw nothing either: the server (or host) paused
                self.stalls.append((round(at, 3), round(ms, 1), None, "", "", "", "", "", ""))

    def summary(self) -> list[str]:
        """One line per stall: its time, and the waits seen most often around it."""
        by_stall: dict[tuple[float, float], Counter[str]] = {}
        for stall_t, stall_ms, _, kind, _, _, wait_type, wait, _ in self.stalls:
            seen = by_stall.setdefault((stall_t, stall_ms), Counter())
            if kind:
                seen[f"{kind}:{wait_type or 'CPU'}:{wait or '-'}"] += 1
        return [
            f"stall {ms:.0f} ms at {time.strftime('%H:%M:%S', time.localtime(at))}: "
            + (
                ", ".join(f"{name} x{n}" for name, n in seen.most_common(4))
                or "no process of the server was seen waiting"
            )
            for (at, ms), seen in sorted(by_stall.items())
        ]

    def write(self, path: Path) -> None:
        with path.open("w", newline="") as out:
            writer = csv.writer(out)
            writer.writerow(FIELDS)
            writer.writerows(self.stalls)
