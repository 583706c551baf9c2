"""The jobs table's health, kept by the maintenance child.

Autovacuum keeps a queue table healthy only while it keeps up: on a busy server its workers
can be busy with other tables for hours, and right after ``workerpool migrate`` the table's
statistics describe an empty table. So every :data:`HEALTH_INTERVAL` the maintenance child
reads the table's counters (:func:`read`) and, when they show autovacuum well behind, runs
``ANALYZE`` or ``VACUUM (ANALYZE)`` itself, on a thread and a connection of its own so that a
long VACUUM never delays a cron tick or the heartbeat. A role that may not do so (not the
table's owner) is told once, in the log, what it cannot do and why.

VACUUM does not shrink a B-tree: after a backlog drains, the due index keeps the pages the
backlog grew it to, and every claim walks them. So the same reads compare each index with the
size its entries would take packed (:func:`workerpool.sql.table_health.index_sizes`) and rebuild one
far above it (the size floor counting the table's indexes together: a small, hot table has no
single large index) with ``REINDEX INDEX CONCURRENTLY`` (writers go on meanwhile), one at a time and
never inside the configured busy hours; an invalid index that an interrupted rebuild left behind
(``*_ccnew``, ``*_ccold``) is dropped first.

The claim does not depend on any of this for its plan (``sql.planner``); dead rows and
stale statistics still cost every index scan and every other query on the table.

:func:`read` returns the health as data: ``workerpool status`` shows it, and metrics can
export the same fields.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine

from ...model import metrics
from ...model.specs import MaintenanceSpec, busy_window, in_window
from ...sql import db, table_health

log = logging.getLogger("workerpool.maintenance")

#: Seconds between two reads of the table's health (a read is a few catalog lookups).
HEALTH_INTERVAL = 10.0
#: ANALYZE when this many rows changed since the last analyze, and at least this share of the
#: table: five times what the table's own autovacuum settings wait for (migration 0004), so
#: where autovacuum keeps up this never fires.
ANALYZE_MIN_CHANGES = 10_000
ANALYZE_CHANGED_SHARE = 0.10
#: VACUUM (ANALYZE) when this many rows are dead, and at least this share of the table ...
VACUUM_MIN_DEAD = 10_000
VACUUM_DEAD_SHARE = 0.10
#: ... and no vacuum ran in the last this many seconds: dead rows a held-back horizon keeps
#: cannot be removed, and vacuuming again at once would only read the table again.
VACUUM_MIN_GAP = 30.0
#: ... and no analyze in the last this many seconds (autovacuum's own naptime), unless the
#: planner's row count is off by more than ANALYZE_OFF_BY (a load right after a migration): on
#: a busy queue the changes pass the threshold within seconds, and an ANALYZE at every read
#: would take every turn (the index rebuilds' too) for statistics that barely moved.
ANALYZE_MIN_GAP = 60.0
ANALYZE_OFF_BY = 2.0
#: Bound on one ANALYZE or VACUUM (seconds): the server's statement_timeout and our own cancel.
COMMAND_TIMEOUT = 600.0
LOCK_TIMEOUT = 5.0
#: Seconds before an index whose rebuild failed (its time bound, a lock) is tried again.
REBUILD_RETRY = 3600.0
#: Seconds before an index is rebuilt again: a hot queue's indexes grow back to their working
#: size within minutes, and a rebuild each pass would cost more than the pages it frees.
REBUILD_GAP = 600.0
#: An index smaller than this is never rebuilt for the table's sake (see ``_bloated``).
SMALL_INDEX_BYTES = 1024 * 1024
#: A transaction that holds the horizon back longer than this is logged (once per holder).
HORIZON_WARN_AGE = 300.0


@dataclass(frozen=True)
class Holder:
    """The transaction (or slot) holding back the oldest xmin: what vacuum may not remove."""

    kind: str  # session, prepared transaction, replication slot
    name: str  # its pid, gid or slot name
    application: str | None
    role: str | None
    state: str | None
    xid_age: int  # transactions since its snapshot
    age_s: float | None  # seconds since it began (None for a slot)


@dataclass(frozen=True)
class TableHealth:
    live: int
    dead: int
    modified: int  # rows changed since the last analyze
    estimated_rows: int  # the planner's row count (pg_class.reltuples; -1: never counted)
    table_bytes: int
    index_bytes: int
    vacuum_age_s: float | None  # seconds since the last manual VACUUM (None: never)
    autovacuum_age_s: float | None
    analyze_age_s: float | None
    autoanalyze_age_s: float | None
    holder: Holder | None

    @property
    def last_vacuum_age_s(self) -> float | None:
        return _newest(self.vacuum_age_s, self.autovacuum_age_s)

    @property
    def last_analyze_age_s(self) -> float | None:
        return _newest(self.analyze_age_s, self.autoanalyze_age_s)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["last_vacuum_age_s"] = self.last_vacuum_age_s
        data["last_analyze_age_s"] = self.last_analyze_age_s
        return {
            key: round(value, 3) if isinstance(value, float) else value
            for key, value in data.items()
        }


def _newest(*ages: float | None) -> float | None:
    known = [age for age in ages if age is not None]
    return min(known) if known else None


def read(conn: Connection) -> TableHealth:
    """The jobs table's health now (catalog and statistics views only: any role may read it)."""
    row = table_health.table_stats(conn)
    holders = table_health.horizon_holders(conn, limit=1)
    holder = Holder(**holders[0]._asdict()) if holders else None
    return TableHealth(
        live=row.live,
        dead=row.dead,
        modified=row.modified,
        estimated_rows=row.estimated_rows,
        table_bytes=row.table_bytes,
        index_bytes=row.index_bytes,
        vacuum_age_s=row.vacuum_age,
        autovacuum_age_s=row.autovacuum_age,
        analyze_age_s=row.analyze_age,
        autoanalyze_age_s=row.autoanalyze_age,
        holder=holder,
    )


def read_now(engine: Engine) -> TableHealth:
    with engine.connect() as conn:
        return read(conn)


def overdue(health: TableHealth) -> str | None:
    """The command autovacuum should have run by now (``VACUUM`` or ``ANALYZE``), if any."""
    rows = max(health.live, health.estimated_rows, 0)
    last_vacuum = health.last_vacuum_age_s
    if health.dead >= max(VACUUM_MIN_DEAD, VACUUM_DEAD_SHARE * rows) and (
        last_vacuum is None or last_vacuum >= VACUUM_MIN_GAP
    ):
        return table_health.VACUUM
    last_analyze = health.last_analyze_age_s
    counted, live = max(health.estimated_rows, 0), max(health.live, 0)
    off = max(counted, live) > ANALYZE_OFF_BY * min(counted, live)
    if health.modified >= max(ANALYZE_MIN_CHANGES, ANALYZE_CHANGED_SHARE * rows) and (
        off or last_analyze is None or last_analyze >= ANALYZE_MIN_GAP
    ):
        return table_health.ANALYZE
    return None


#: The log event of each command, by its first word.
_EVENTS = {
    "VACUUM": "table_vacuumed",
    "ANALYZE": "table_analyzed",
    "REINDEX": "index_rebuilt",
    "DROP": "index_leftover_dropped",
}


class TableKeeper:
    """Reads the table's health at a bounded cadence and runs what is overdue in the background.

    ``tick()`` is cheap between reads; ``check()`` reads now. One command at a time: while one
    runs, a due read only logs. ``engine`` serves the reads; commands get a connection of
    their own (autocommit: VACUUM cannot run in a transaction block).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        clock: Callable[[], float] = time.monotonic,
        pooled: bool = False,
        settings: MaintenanceSpec | None = None,
        utc_now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.engine = engine
        self.settings = settings or MaintenanceSpec()
        self.busy_hours = busy_window(self.settings.busy_hours)
        self.utc_now = utc_now
        self.pooled = pooled  # behind PgBouncer: its command engine sets no startup options
        self.clock = clock
        self._next_read = 0.0
        self._thread: threading.Thread | None = None
        self._command_engine: Engine | None = None
        self._running: Any = None  # the psycopg connection of the command in progress
        self._denied = False  # logged once that this role may not maintain the table
        self._warned: set[tuple[str, str]] = set()
        self._failed: dict[str, float] = {}  # index -> when its rebuild last failed
        self._rebuilt: dict[str, float] = {}  # index -> when it was last rebuilt

    def tick(self) -> None:
        now = self.clock()
        if now < self._next_read:
            return
        self._next_read = now + HEALTH_INTERVAL
        self.check()

    def check(self) -> str | None:
        """Read the health; start what is overdue. Returns the command started, if any."""
        with self.engine.connect() as conn:
            health = read(conn)
            self._warn_horizon(health.holder)
            if self.busy():
                return None
            command = self._next_command(conn, health)
            if command is None or not self._allowed(conn, command):
                return None
        self._thread = threading.Thread(
            target=self._run, args=(command,), name="table-health", daemon=True
        )
        self._thread.start()
        return command

    def _next_command(self, conn: Connection, health: TableHealth) -> str | None:
        """A due VACUUM first (it refreshes the entry counts the bloat estimate reads), then
        index work, then a due ANALYZE: on a busy queue one of the two table commands is due
        at nearly every read, and the rebuilds must still get their turn."""
        table_command = overdue(health)
        if table_command == table_health.VACUUM:
            return table_command
        return self._index_work(conn) or table_command

    def _index_work(self, conn: Connection) -> str | None:
        """A leftover of an interrupted rebuild to drop, else the most bloated index to rebuild
        (outside the busy hours), else None."""
        indexes = table_health.index_sizes(conn)
        for index in indexes:
            if not index.valid and any(mark in index.name for mark in table_health.LEFTOVER_MARKS):
                return table_health.drop_leftover(index.name)
        if in_window(self.busy_hours, self.utc_now().time()):
            return None
        bloated = self._bloated(indexes)
        if not bloated:
            return None
        worst = max(bloated, key=lambda index: index.bloat)
        log.info(
            "index %s is %.1fx the size its entries would take packed (%.1f MiB against"
            " %.1f MiB): rebuilding it",
            worst.name,
            worst.bloat,
            worst.bytes / 2**20,
            worst.packed_bytes / 2**20,
            extra={
                "event": "index_bloated",
                "index": worst.name,
                "bytes": worst.bytes,
                "packed_bytes": worst.packed_bytes,
            },
        )
        return table_health.reindex(worst.name)

    def _bloated(self, indexes: list[table_health.IndexSize]) -> list[table_health.IndexSize]:
        """The indexes worth a rebuild: ``reindex_bloat`` times their packed size, where the
        size floor (``reindex_min_bytes``) holds for the table's indexes together: on a small,
        hot table each index stays under it while all of them, walked by every claim and
        completion, are several times what their entries need. Not an index under
        SMALL_INDEX_BYTES (nothing to win), nor one rebuilt within REBUILD_GAP or whose rebuild
        failed within REBUILD_RETRY."""
        now, valid = self.clock(), [index for index in indexes if index.valid]
        together = sum(index.bytes for index in valid)
        return [
            index
            for index in valid
            if index.bloat >= self.settings.reindex_bloat
            and index.bytes >= min(SMALL_INDEX_BYTES, self.settings.reindex_min_bytes)
            and (
                index.bytes >= self.settings.reindex_min_bytes
                or together >= self.settings.reindex_min_bytes
            )
            and now - self._failed.get(index.name, -math.inf) >= REBUILD_RETRY
            and now - self._rebuilt.get(index.name, -math.inf) >= REBUILD_GAP
        ]

    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def close(self) -> None:
        """Cancel a command in progress (its work is redone by the next one) and let go."""
        running = self._running
        if running is not None:
            with contextlib.suppress(Exception):
                running.cancel()
        self.wait(LOCK_TIMEOUT)
        if self._command_engine is not None:
            self._command_engine.dispose()

    def _allowed(self, conn: Connection, command: str) -> bool:
        allowed, why = table_health.may_maintain(conn)
        if not allowed and not self._denied:
            self._denied = True
            log.warning(
                "cannot run %r: %s; the jobs table's statistics and dead rows are left"
                " to autovacuum (grant the owner role to the maintenance process's role,"
                " or schedule ANALYZE and VACUUM as the owner)",
                command,
                why,
                extra={"event": "table_health_denied", "command": command},
            )
        return allowed

    def _run(self, command: str) -> None:
        started = time.monotonic()
        try:
            self._execute(command)
        except Exception as exc:  # the next read retries; nothing here may kill maintenance
            if command.startswith("REINDEX"):  # not again for a while: it may be too big
                self._failed[command.rsplit(" ", 1)[-1].strip('"')] = self.clock()
            log.warning(
                "%s failed (%s: %s)",
                command,
                type(exc).__name__,
                str(exc).strip().splitlines()[0] if str(exc).strip() else "",
                extra={"event": "table_health_failed", "command": command},
            )
            return
        seconds = time.monotonic() - started
        log.info(
            "%s took %.1fs",
            command,
            seconds,
            extra={
                "event": _EVENTS.get(command.split(" ")[0], "table_analyzed"),
                "seconds": round(seconds, 3),
            },
        )
        if command.startswith("REINDEX"):
            name = command.rsplit(" ", 1)[-1].strip('"')
            self._rebuilt[name] = self.clock()
            metrics.record.index_rebuilt(name)

    def _execute(self, command: str) -> None:
        if self._command_engine is None:
            limits = {
                "statement_timeout": f"{round(COMMAND_TIMEOUT * 1000)}ms",
                "lock_timeout": f"{round(LOCK_TIMEOUT * 1000)}ms",
            }
            self._command_engine = db.create(
                self.engine.url,
                application_name="workerpool maintenance: table health",
                pool_size=1,
                session_settings=limits,
                pooled=self.pooled,
            )
        with self._command_engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            raw = conn.connection.driver_connection
            # Behind PgBouncer the startup options are not sent: this cancel is the bound there.
            timer = threading.Timer(COMMAND_TIMEOUT, raw.cancel)
            self._running = raw
            timer.start()
            try:
                conn.exec_driver_sql(command)
            finally:
                timer.cancel()
                self._running = None

    def _warn_horizon(self, holder: Holder | None) -> None:
        if holder is None or holder.age_s is None or holder.age_s < HORIZON_WARN_AGE:
            return
        if (holder.kind, holder.name) in self._warned:
            return
        self._warned.add((holder.kind, holder.name))
        log.warning(
            "%s %s (%s, role %s, %s) has held back the xmin horizon for %.0fs: vacuum"
            " cannot remove the jobs table's dead rows until it ends",
            holder.kind,
            holder.name,
            holder.application or "-",
            holder.role or "-",
            holder.state or "-",
            holder.age_s,
            extra={"event": "horizon_held", "holder": holder.name, "kind": holder.kind},
        )
