"""Cron scheduling: each tick of each schedule becomes at most one job, across all replicas.

One pass (run by every maintenance child, on every replica) does, in one transaction:

1. make sure each declared schedule has its ``workerpool_cron`` row;
2. lock the rows no other replica is scheduling right now (``FOR UPDATE SKIP LOCKED``);
3. for each locked row whose ``next_tick`` has come (database clock), decide what the latest due
   tick becomes: a job (key ``cron:<name>:<tick>``, unique in the database), a skip counted in
   ``skipped`` (the previous run is still pending, processing or failed), or nothing
   (``missed="skip"`` after downtime), or nothing while an operator has the schedule paused
   (``paused`` in the row, set at run time and never reset from code); then move ``next_tick``
   past it.

Ticks are computed with croniter in the schedule's timezone from ``now()`` of the database.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from croniter import croniter
from sqlalchemy import Connection

from ... import sql
from ...model.new_job import build_job
from ...model.registry import Registry
from ...model.specs import CronSpec
from ...model.states import LIVE_STATES
from ...sql.crons import added_names

log = logging.getLogger("workerpool.cron")

#: A tick first seen later than this after it was due counts as missed (``missed="skip"``).
#: Passes run every second; being a minute late means no scheduler was running.
MISSED_GRACE = timedelta(seconds=60)

WAIT, ENQUEUE, RESET = "wait", "enqueue", "reset"
SKIP_OVERLAP, SKIP_MISSED, SKIP_PAUSED = "skip_overlap", "skip_missed", "skip_paused"


@dataclass(frozen=True)
class Decision:
    """What to do with a schedule this pass."""

    action: str
    tick: datetime | None = None  # the tick handled (UTC)
    next_tick: datetime | None = None  # the first tick after it (UTC)
    late: bool = False  # ticks were missed (downtime) before this one


def next_tick_after(spec: CronSpec, moment: datetime) -> datetime:
    """The first tick strictly after ``moment``, in UTC."""
    local = moment.astimezone(ZoneInfo(spec.timezone))
    return croniter(spec.expression, local).get_next(datetime).astimezone(UTC)


def latest_tick_until(spec: CronSpec, moment: datetime) -> datetime:
    """The last tick at or before ``moment``, in UTC."""
    local = moment.astimezone(ZoneInfo(spec.timezone))
    before = croniter(spec.expression, local).get_prev(datetime).astimezone(UTC)
    exact = next_tick_after(spec, before)
    return exact if exact <= moment else before


def tick_key(name: str, tick: datetime) -> str:
    return f"cron:{name}:{tick.astimezone(UTC).isoformat()}"


def decide(spec: CronSpec, row: Any, now: datetime) -> Decision:
    """Pure: from the schedule row (``next_tick``, ``last_job_state``...) and ``now``."""
    if row.next_tick is None or (row.expression, row.timezone) != (spec.expression, spec.timezone):
        return Decision(RESET, next_tick=next_tick_after(spec, now))  # new or changed: from now on
    if now < row.next_tick:
        return Decision(WAIT)
    tick = max(latest_tick_until(spec, now), row.next_tick)
    following = next_tick_after(spec, tick)
    late = tick > row.next_tick or now - tick > MISSED_GRACE
    if row.paused:  # the tick passes: resuming starts at the next one, with no catch-up
        return Decision(SKIP_PAUSED, tick, following, late=late)
    if spec.missed == "skip" and now - tick > MISSED_GRACE:
        return Decision(SKIP_MISSED, tick, following, late=True)
    if spec.overlap == "skip" and row.last_job_state in LIVE_STATES:
        return Decision(SKIP_OVERLAP, tick, following, late=late)
    return Decision(ENQUEUE, tick, following, late=late)


def schedule(registry: Registry, conn: Connection) -> list[tuple[str, Decision]]:
    """One scheduling pass over ``registry.crons`` and the schedules added at run time (read
    from their rows on every pass: an added, changed or removed one counts from the next
    pass), inside the caller's transaction."""
    specs = list(registry.crons.values())
    if specs:
        sql.ensure_crons(conn, [(s.name, s.queue, s.expression, s.timezone) for s in specs])
    added = [name for name in added_names(conn) if name not in registry.crons]
    if not specs and not added:
        return []
    now = sql.database_now(conn)
    done = []
    for row in sql.lock_crons(conn, [s.name for s in specs] + added):
        try:
            with conn.begin_nested():  # one schedule's failure must not stop the others
                spec = registry.crons.get(row.name) or added_spec(row)
                decision = decide(spec, row, now)
                apply(registry, conn, spec, row, decision)
        except Exception:
            log.exception(
                "cron %s: scheduling failed",
                row.name,
                extra={"event": "cron_failed", "cron": row.name},
            )
            continue
        done.append((row.name, decision))
    return done


def added_spec(row: Any) -> CronSpec:
    """The spec of a schedule added at run time, from its row (checked again: a row is data)."""
    return CronSpec(row.name, row.expression, row.queue, timezone=row.timezone)


def apply(
    registry: Registry, conn: Connection, spec: CronSpec, row: Any, decision: Decision
) -> None:
    """Write one decision (the schedule row is locked by this transaction)."""
    if decision.action == WAIT:
        return
    if decision.action == RESET:
        sql.reset_cron(
            conn,
            spec.name,
            queue=spec.queue,
            expression=spec.expression,
            timezone=spec.timezone,
            next_tick=decision.next_tick,
        )
        return
    assert decision.tick is not None and decision.next_tick is not None
    enqueue = decision.action == ENQUEUE
    added = None if spec.name in registry.crons else row  # a declaration wins over a row
    job_id = enqueue_tick(registry, conn, spec, decision.tick, added) if enqueue else None
    sql.advance_cron(
        conn,
        spec.name,
        queue=spec.queue,
        tick=decision.tick,
        next_tick=decision.next_tick,
        job_id=job_id,
        skipped=decision.action == SKIP_OVERLAP,
    )
    log_decision(spec, row, decision, job_id)


def enqueue_tick(
    registry: Registry, conn: Connection, spec: CronSpec, tick: datetime, row: Any = None
) -> int:
    """The job of one tick. Its key makes a second insert of the same tick return the first job.
    A declared schedule's task has its name; an added one's row names its task and payload."""
    iso = tick.astimezone(UTC).isoformat()
    task = getattr(row, "task", None) or spec.name
    payload = {**(getattr(row, "payload", None) or {}), "tick": iso}
    job = build_job(registry, task, payload, key=tick_key(spec.name, tick))
    job_id = sql.insert_jobs(conn, [job])[0]
    if registry.notify:
        sql.notify(conn, [spec.queue])
    return job_id


def log_decision(spec: CronSpec, row: Any, decision: Decision, job_id: int | None) -> None:
    tick = decision.tick.isoformat() if decision.tick else None
    extra = {"cron": spec.name, "queue": spec.queue, "tick": tick, "job_id": job_id}
    if decision.action == ENQUEUE:
        event = "cron_catch_up" if decision.late else "cron_tick_enqueued"
        log.info(
            "cron %s: tick %s enqueued as job %s%s",
            spec.name,
            tick,
            job_id,
            " (catch-up after missed ticks)" if decision.late else "",
            extra={"event": event, **extra},
        )
    elif decision.action == SKIP_OVERLAP:
        log.warning(
            "cron tick skipped: %s tick %s, previous run (job %s) is still %s",
            spec.name,
            tick,
            row.last_job_id,
            row.last_job_state,
            extra={"event": "cron_tick_skipped", **extra, "previous_job": row.last_job_id},
        )
    elif decision.action == SKIP_PAUSED:
        log.info(
            "cron %s: tick %s not run (paused by %s)",
            spec.name,
            tick,
            row.paused_by,
            extra={"event": "cron_tick_paused", **extra, "by": row.paused_by},
        )
    elif decision.action == SKIP_MISSED:
        log.warning(
            "cron ticks missed: %s up to %s not run (missed=skip); next %s",
            spec.name,
            tick,
            decision.next_tick.isoformat() if decision.next_tick else None,
            extra={"event": "cron_ticks_missed", **extra},
        )
