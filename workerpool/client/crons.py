"""Cron schedules at run time: pause, resume and run now, on every replica at once; and
schedules added, changed and removed without a deploy (``cron_add``, ``cron_remove``).

The code declares a schedule (expression, queue: the defaults); these calls change its row in
``workerpool_cron`` (paused, by whom, when), which every replica's scheduler reads on each pass
and a restart never resets. Each call writes its audit entry in the same transaction.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import Connection

from .. import sql
from ..model.errors import ConfigError, CronDeclared, InvalidJob, UnknownCron
from ..model.new_job import build_job
from ..model.payload import dumps
from ..model.registry import Registry
from ..model.specs import CronSpec
from ..model.validation import check_name
from ..sql import audit, crons, unique_keys

MAX_REQUEST = 100


def set_paused(registry: Registry, conn: Connection, name: str, paused: bool, by: str) -> None:
    """Pause or resume ``name``; UnknownCron (nothing written) for a schedule nobody knows."""
    _check_known(registry, conn, name)
    if name in registry.crons:  # declared but never scheduled yet: its row from the code
        spec = registry.crons[name]
        sql.ensure_crons(conn, [(spec.name, spec.queue, spec.expression, spec.timezone)])
    crons.set_cron_paused(conn, name, paused, by)
    audit.record(conn, by, "cron_pause" if paused else "cron_resume", f"cron:{name}")


def run_now(
    registry: Registry, conn: Connection, name: str, by: str, request: str | None = None
) -> int:
    """Enqueue one job of ``name`` now; the same ``request`` id returns the same job."""
    check_name("cron", name)  # raises ConfigError, a WorkerpoolError
    if name not in registry.crons:
        raise UnknownCron(_unknown(name, registry, conn, "run (the app must declare it)"))
    request = _request_id(request)
    key = f"cron:{name}:manual:{request}"
    held = unique_keys.holder(conn, key)
    if held is not None:
        return int(held.id)
    spec = registry.crons[name]
    sql.ensure_crons(conn, [(spec.name, spec.queue, spec.expression, spec.timezone)])
    now = sql.database_now(conn).isoformat()
    job = build_job(registry, name, {"tick": now, "manual": True, "request": request}, key=key)
    job_id = sql.insert_jobs(conn, [job], notify=registry.notify)[0]
    crons.set_last_job(conn, name, job_id)
    audit.record(conn, by, "cron_run", f"cron:{name}", {"job_id": job_id, "request": request})
    return job_id


def _request_id(request: Any) -> str:
    if request is None:
        return uuid.uuid4().hex
    ok = isinstance(request, str) and 0 < len(request) <= MAX_REQUEST and request.isascii()
    if not ok or not all(ch.isalnum() or ch in "_-.:" for ch in request):
        raise InvalidJob(
            f"request must be 1 to {MAX_REQUEST} letters, digits, '_', '-', '.'"
            f" or ':'; got {request!r}"
        )
    return request


def _check_known(registry: Registry, conn: Connection, name: str) -> None:
    check_name("cron", name)
    if name not in registry.crons and name not in crons.cron_names(conn):
        raise UnknownCron(_unknown(name, registry, conn, "pause or resume"))


def _unknown(name: str, registry: Registry, conn: Connection, what: str) -> str:
    names = set(registry.crons) | crons.cron_names(conn)
    return (
        f"unknown cron {name!r}: cannot {what}; known crons: {', '.join(sorted(names)) or '(none)'}"
    )


def add(
    registry: Registry,
    conn: Connection,
    name: str,
    expression: str,
    *,
    task: str,
    payload: Any,
    queue: str | None,
    timezone: str,
    by: str,
) -> None:
    """Add schedule ``name`` (or change one added before); every input checked first."""
    spec = CronSpec(name, expression, queue or "default", timezone=timezone)  # checks all three
    task_spec = registry.task_spec(task)  # UnknownTask
    if queue is not None and queue != task_spec.queue:
        raise ConfigError(
            f"cron {name}: task {task} runs on queue {task_spec.queue!r}, not {queue!r}"
        )
    payload_json = dumps(payload or {}, limit=registry.payload_limit, what="cron payload")
    _refuse_declared(registry, conn, name, "added")
    crons.add_cron(
        conn,
        name,
        queue=task_spec.queue,
        expression=spec.expression,
        timezone=spec.timezone,
        task=task_spec.name,
        payload_json=payload_json,
        by=by,
    )
    detail = {"expression": expression, "task": task_spec.name, "timezone": timezone}
    audit.record(conn, by, "cron_add", f"cron:{name}", {**detail, "payload": payload})


def remove(registry: Registry, conn: Connection, name: str, by: str) -> None:
    """Remove added schedule ``name``: its ticks stop on every replica at their next pass."""
    check_name("cron", name)
    _refuse_declared(registry, conn, name, "removed")
    if not crons.remove_cron(conn, name):
        raise UnknownCron(_unknown(name, registry, conn, "remove"))
    audit.record(conn, by, "cron_remove", f"cron:{name}")


def _refuse_declared(registry: Registry, conn: Connection, name: str, what: str) -> None:
    row = crons.cron_row(conn, name)
    if name in registry.crons or (row is not None and row.task is None):
        raise CronDeclared(
            f"cron {name} is declared in code (@pool.cron): it cannot be {what} at run time;"
            " change the code and deploy"
        )
