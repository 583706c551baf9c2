"""The HTTP door in: ``POST /api/jobs`` enqueues, ``GET /api/jobs/{id}`` reads a job.

For producers without Python (a Node service, a Rails app): the job goes through SQL's
``workerpool_enqueue`` (migration 0022), so it meets the checks, the registered tasks and the
queue bounds every door meets, and nothing is written on a refusal. Answers are JSON: ``201
{"id": N}``; a refusal is a 4xx with ``{"error": "<one line>"}`` (400 bad input, 404 unknown
task or job, 409 a key held by another job, 413 a body too large, 415 not JSON, 429 a full
queue).

Authentication is a Bearer token (``WORKERPOOL_WEB_TOKEN``; :class:`~.security.Guard` checks
it): the API refuses a request without one, also the basic-auth form a browser would replay on
its own, so no cookie or cached password can enqueue and no CSRF token is needed. Behind an
application's own user resolver (``app(pool, user=...)``) the resolved user decides instead: an
admin may enqueue, a read-only user may read. A read-only dashboard serves no POST.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from ..model.errors import (
    IdempotencyConflict,
    InvalidJob,
    QueueFull,
    UnknownJob,
    UnknownTask,
    first_line,
)
from ..model.payload import PAYLOAD_HARD_LIMIT
from ..model.results import JobInfo
from ..sql import doors
from .access import user_of

#: The fields of ``POST /api/jobs``; any other is refused (a typo must not pass silently).
FIELDS = ("task", "payload", "queue", "key", "run_at", "priority", "max_attempts", "tags")
#: A body larger than this is refused unread: the payload's own limit is checked in SQL.
MAX_BODY = PAYLOAD_HARD_LIMIT + 64 * 1024

STATUS: list[tuple[type[Exception], int]] = [
    (QueueFull, 429),
    (IdempotencyConflict, 409),
    (UnknownTask, 404),
    (UnknownJob, 404),
    (InvalidJob, 400),
]


class Refused(Exception):
    """A request the API answers with ``status`` and one line."""

    def __init__(self, status: int, line: str) -> None:
        self.status = status
        super().__init__(line)


async def create_job(request: Request) -> JSONResponse:
    """``POST /api/jobs``: ``{"task", "payload", "key", "run_at", ...}`` -> ``201 {"id": N}``."""
    try:
        _authorised(request)
        fields = _fields(await _json_body(request))
        job_id = await run_in_threadpool(_enqueue, request.app.state.pool, fields)
    except Exception as exc:
        return _refusal(exc)
    return JSONResponse({"id": job_id}, status_code=201)


async def read_job(request: Request) -> JSONResponse:
    """``GET /api/jobs/{id}``: the job's state, result, attempts and errors."""
    try:
        _authorised(request)
        job_id = _job_id(request.path_params["job_id"])
        info = await run_in_threadpool(request.app.state.pool.job, job_id)
    except Exception as exc:
        return _refusal(exc)
    return JSONResponse(job_json(info))


def job_json(info: JobInfo) -> dict[str, Any]:
    return {
        "id": info.id,
        "queue": info.queue,
        "task": info.task,
        "state": info.state,
        "result": info.result,
        "attempts": info.attempts,
        "max_attempts": info.max_attempts,
        "errors": info.errors,
        "dead_reason": info.dead_reason,
        "key": info.key,
        "created_at": _iso(info.created_at),
        "run_at": _iso(info.run_at),
        "finished_at": _iso(info.finished_at),
    }


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


# -- checks, before anything is written -----------------------------------------------------------


def _authorised(request: Request) -> None:
    """A Bearer token (checked by the Guard), or a user the application's resolver named."""
    if user_of(request) is not None:
        return
    scheme = request.headers.get("authorization", "").partition(" ")[0]
    if scheme.lower() != "bearer":
        raise Refused(401, "the API needs a bearer token: Authorization: Bearer <token>")
    if not request.app.state.token_set:
        raise Refused(401, "the API needs WORKERPOOL_WEB_TOKEN set on the server")


async def _json_body(request: Request) -> Any:
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != "application/json":
        raise Refused(415, f"send the job as application/json, not {kind or 'no content type'}")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
        raise Refused(413, f"the body is over {MAX_BODY} bytes")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise Refused(413, f"the body is over {MAX_BODY} bytes")
    try:
        return json.loads(body, parse_constant=_no_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise Refused(400, f"the body is not JSON: {first_line(exc)}") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _fields(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise Refused(400, f"the body must be a JSON object, got {type(body).__name__}")
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise Refused(400, f"unknown field(s) {', '.join(unknown)}; known: {', '.join(FIELDS)}")
    if not isinstance(body.get("task"), str) or not body["task"]:
        raise Refused(400, "task must be a task's name (a non-empty string)")
    payload = body.get("payload", {})
    if not isinstance(payload, dict):
        raise Refused(400, f"payload must be a JSON object, got {type(payload).__name__}")
    for name in ("queue", "key"):
        if body.get(name) is not None and not isinstance(body[name], str):
            raise Refused(400, f"{name} must be a string")
    for name in ("priority", "max_attempts"):
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise Refused(400, f"{name} must be an integer, got {value!r:.40}")
    tags = body.get("tags")
    if tags is not None and (
        not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags)
    ):
        raise Refused(400, "tags must be a list of strings")
    return {**body, "payload": payload, "run_at": _run_at(body.get("run_at"))}


def _run_at(value: Any) -> datetime | None:
    if value is None:
        return None
    try:
        when = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        when = None
    if when is None or when.utcoffset() is None:
        raise Refused(400, f"run_at must be an ISO 8601 time with its offset, got {value!r:.60}")
    return when


def _job_id(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 2**63:
        raise Refused(400, f"a job id is a positive integer, got {text!r:.40}")
    return int(text)


def _enqueue(pool: Any, fields: dict[str, Any]) -> int:
    payload_json = json.dumps(fields["payload"])  # escapes: a lone surrogate reaches SQL's check
    with pool.engine.begin() as conn:
        return doors.enqueue(
            conn,
            fields["task"],
            payload_json,
            queue=fields.get("queue"),
            key=fields.get("key"),
            run_at=fields["run_at"],
            priority=fields.get("priority"),
            max_attempts=fields.get("max_attempts"),
            tags=fields.get("tags"),
        )


def _refusal(exc: Exception) -> JSONResponse:
    if isinstance(exc, Refused):
        return JSONResponse({"error": str(exc)}, status_code=exc.status)
    for kind, status in STATUS:
        if isinstance(exc, kind):
            return JSONResponse({"error": first_line(exc)}, status_code=status)
    raise exc
