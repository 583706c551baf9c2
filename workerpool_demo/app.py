"""The demo application: the background jobs of a small web backend.

Three worker types (queues), each a child process under ``workerpool run``:

- ``email``: welcome and password-reset emails through a provider that is sometimes slow, sometimes
  down (503, retried with backoff), sometimes rate-limiting (429, ``RetryLater``: no attempt spent)
  and that rejects invalid addresses (422, ``Permanent``: straight to the dead-letter queue).
  Every email job carries an idempotency key (``welcome:<user_id>``), so a double signup
  enqueues one job, and the provider receives the same key, so a job re-run after a crash
  sends nothing twice. One user's name makes the template renderer blow up its process (the
  poison message): it ends ``dead/abandoned`` after ``max_attempts`` claims and never loops.
- ``user_deletion``: deleting a user touches several stores (sessions and tokens, posts, object
  storage, the account). Each store is one durable step (``job.step``): a retry or a drain
  replays the steps that finished and resumes at the first one that did not, instead of leaving
  half a user behind. The same queue runs data exports: collect (a step), a cooling-off sleep
  (``job.sleep``: no worker held), then a wait for support's approval (``job.wait_for``, woken
  by ``pool.signal``), then the delivery (a step).
- ``housekeeping``: the hourly TTL sweep of expired sessions, API tokens and old audit rows
  (:mod:`workerpool_demo.session_cleanup`), a cron job that never overlaps itself (the demo runs
  it every few seconds through ``$SESSION_CLEANUP_SCHEDULE``).

Each handler declares what it takes after the ``Job`` (``user_id: int``...): a call is checked
when it is enqueued, and the handler gets its arguments rebuilt (docs/typed-tasks.md). The
"web backend" side is the functions ``signup``, ``request_password_reset``,
``request_deletion`` and ``request_export``: each writes its rows and enqueues its job in one
transaction (``task.using(key=..., conn=conn).enqueue(...)``); ``approve_export`` is support's
click, a signal sent in its own transaction.

Timings are shortened for the demo (backoff in seconds, drains of a few seconds); production
would keep workerpool's defaults (docs/configuration.md).
"""

from __future__ import annotations

import os
import random
import secrets
import signal
import threading
import time
from datetime import timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    DateTime,
    Engine,
    ForeignKey,
    Identity,
    Integer,
    MetaData,
    Table,
    Text,
    delete,
    func,
    insert,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert

from workerpool import Backoff, Job, Permanent, RetryLater, WorkerPool

from . import session_cleanup
from .fake_provider import EmailProvider, ProviderError, inbox
from .fake_provider import metadata as provider_metadata
from .fake_provider import requests as provider_requests

pool = WorkerPool()
pool.queue("email", concurrency=4, drain_timeout=5, hang_timeout=30, poll_interval=0.5)
pool.queue("user_deletion", concurrency=2, drain_timeout=5, hang_timeout=30, poll_interval=0.5)
pool.queue("housekeeping", concurrency=1, drain_timeout=5, hang_timeout=30, poll_interval=0.5)
# The hourly TTL sweep from session_cleanup.py, as a cron job on our housekeeping queue.
# Its schedule is $SESSION_CLEANUP_SCHEDULE (the demo sets "* * * * * */3": every 3 seconds).
session_cleanup.register(pool, queue="housekeeping")

#: Production would keep the default (30 s * 4^(n-1)); the demo retries within seconds.
QUICK_BACKOFF = Backoff(base=0.5, factor=2, cap=4, jitter=0.5)
#: The user whose name crashes the template renderer (an OOM kill, simulated with SIGKILL).
POISON_NAME = "Zalgo \u0336\u0334\u0335 the Unrenderable"
DELETION_STEPS = ("sessions", "posts", "uploads", "account")
#: The export's cooling-off period (seconds): the job sleeps, holding no worker.
EXPORT_COOL_OFF = 1.0

# -- the application's tables (its own metadata, next to workerpool's) -------------------------
# Sessions, API tokens and the audit log are session_cleanup's tables: the sweep cleans them.

sessions = session_cleanup.sessions
api_tokens = session_cleanup.api_tokens
audit_log = session_cleanup.audit_log

metadata = MetaData()
TZ = DateTime(timezone=True)

users = Table(
    "demo_users",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("email", Text, nullable=False, unique=True),
    Column("name", Text, nullable=False),
    Column("created_at", TZ, nullable=False, server_default=func.now()),
)
reset_tokens = Table(
    "demo_reset_tokens",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("user_id", BigInteger, ForeignKey("demo_users.id"), nullable=False, index=True),
    Column("expires_at", TZ, nullable=False),
)
posts = Table(
    "demo_posts",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("user_id", BigInteger, ForeignKey("demo_users.id"), nullable=False, index=True),
    Column("body", Text, nullable=False),
)
uploads = Table(  # files in object storage, one row per object
    "demo_uploads",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("user_id", BigInteger, ForeignKey("demo_users.id"), nullable=False, index=True),
    Column("object_key", Text, nullable=False),
)
deletion_steps = Table(  # one row per step actually executed: shows resumption
    "demo_deletion_steps",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("job_id", BigInteger, nullable=False),
    Column("user_id", BigInteger, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("step", Text, nullable=False),
    Column("at", TZ, nullable=False, server_default=func.now()),
)
exports = Table(  # the delivered data exports: one per export job (the download link sent)
    "demo_exports",
    metadata,
    Column("job_id", BigInteger, primary_key=True),
    Column("user_id", BigInteger, nullable=False),
    Column("posts", Integer, nullable=False),
    Column("uploads", Integer, nullable=False),
    Column("approved_by", Text, nullable=False),
    Column("at", TZ, nullable=False, server_default=func.now()),
)


def create_tables(engine: Engine) -> None:
    metadata.create_all(engine)
    provider_metadata.create_all(engine)
    session_cleanup.create_tables(engine)


# -- the web backend: each request writes its rows and enqueues its job in one transaction -----


def signup(conn: Connection, email: str, name: str) -> int:
    """Create the account (idempotent on email: a double click is one user) and welcome them."""
    stmt = pg_insert(users).values(email=email, name=name)
    stmt = stmt.on_conflict_do_update(index_elements=[users.c.email], set_={"name": name})
    user_id = conn.execute(stmt.returning(users.c.id)).scalar_one()
    conn.execute(insert(sessions).values(user_id=user_id, expires_at=_in(timedelta(days=1))))
    conn.execute(insert(audit_log).values(event="signup"))
    send_welcome.using(key=f"welcome:{user_id}", conn=conn).enqueue(user_id)
    return user_id


def request_password_reset(conn: Connection, user_id: int) -> int:
    token_id = conn.execute(
        insert(reset_tokens)
        .values(user_id=user_id, expires_at=_in(timedelta(hours=1)))
        .returning(reset_tokens.c.id)
    ).scalar_one()
    send_password_reset.using(key=f"reset:{token_id}", conn=conn).enqueue(user_id, token_id)
    return token_id


def request_deletion(conn: Connection, user_id: int) -> int:
    conn.execute(insert(audit_log).values(event="account deletion requested"))
    return delete_user.using(key=f"delete:{user_id}", conn=conn).enqueue(user_id).id


def request_export(conn: Connection, user_id: int) -> int:
    conn.execute(insert(audit_log).values(event="data export requested"))
    return export_data.using(key=f"export:{user_id}", conn=conn).enqueue(user_id).id


def approve_export(conn: Connection, user_id: int, by: str) -> None:
    """Support approves an export: a signal, whether its job waits for it yet or not."""
    pool.signal(f"export_approved:{user_id}", {"by": by}, conn=conn)


def seed_existing_users(conn: Connection, count: int, rng: random.Random) -> list[int]:
    """Users who signed up long ago: sessions and API tokens (some expired), posts, files, and
    audit rows (some past retention)."""
    ids = []
    for n in range(count):
        user_id = conn.execute(
            insert(users)
            .values(email=f"member{n}@example.com", name=f"Member {n}")
            .returning(users.c.id)
        ).scalar_one()
        ids.append(user_id)
        for _ in range(rng.randint(1, 4)):
            expired = rng.random() < 0.5
            expires_at = _ago(timedelta(hours=1)) if expired else _in(timedelta(hours=2))
            conn.execute(insert(sessions).values(user_id=user_id, expires_at=expires_at))
        conn.execute(
            insert(api_tokens).values(
                [
                    {
                        "user_id": user_id,
                        "token_hash": secrets.token_hex(16),
                        "expires_at": _ago(timedelta(days=3))
                        if k == 0
                        else _in(timedelta(days=30)),
                    }
                    for k in range(2)
                ]
            )
        )
        conn.execute(
            insert(posts).values(
                [{"user_id": user_id, "body": f"post {k}"} for k in range(rng.randint(1, 6))]
            )
        )
        conn.execute(
            insert(uploads).values(
                [
                    {"user_id": user_id, "object_key": f"u/{user_id}/{k}.jpg"}
                    for k in range(rng.randint(2, 6))
                ]
            )
        )
        conn.execute(
            insert(audit_log).values(
                [
                    {"event": "login", "at": _ago(timedelta(days=rng.randint(1, 200)))}
                    for _ in range(3)
                ]
            )
        )
    return ids


def _in(delta: timedelta) -> Any:
    return func.now() + delta


def _ago(delta: timedelta) -> Any:
    return func.now() - delta


# -- email --------------------------------------------------------------------------------------

_providers: dict[int, EmailProvider] = {}
_providers_lock = threading.Lock()


def provider() -> EmailProvider:
    """One client per engine: a forked child builds its own engine, hence its own client."""
    engine = pool.engine
    with _providers_lock:
        return _providers.setdefault(id(engine), EmailProvider(engine))


def deliver(job: Job, to: str, template: str) -> None:
    """Send through the provider and translate its HTTP answer into a workerpool outcome."""
    try:
        provider().send(idempotency_key=job.key or f"job:{job.id}", to=to, template=template)
    except ProviderError as exc:
        if exc.status == 422:
            raise Permanent(str(exc)) from exc  # retrying cannot fix an address
        if exc.status == 429:
            raise RetryLater(exc.retry_after or 1.0, str(exc)) from exc  # not the job's fault
        raise  # 5xx: failed, retried with backoff


def load_user(user_id: int) -> Any:
    with pool.engine.connect() as conn:
        return conn.execute(select(users).where(users.c.id == user_id)).first()


def render(template: str, user: Any) -> str:
    if user.name == POISON_NAME:
        # On this name the renderer balloons its memory for a second or so, until the kernel's
        # OOM killer ends the whole process (simulated: SIGKILL). Jobs running next to it in the
        # same process mostly finish first; the slow ones die with it and lose an attempt.
        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGKILL)
    return f"[{template}] Hello {user.name}!"


@pool.task(queue="email", max_attempts=5, timeout=30, backoff=QUICK_BACKOFF)
def send_welcome(job: Job, user_id: int) -> None:
    user = load_user(user_id)
    if user is None:
        return  # deleted before we got to it: nobody to welcome
    render("welcome", user)
    deliver(job, user.email, "welcome")


@pool.task(queue="email", max_attempts=5, timeout=30, backoff=QUICK_BACKOFF)
def send_password_reset(job: Job, user_id: int, token_id: int) -> None:
    with pool.engine.connect() as conn:
        row = conn.execute(
            select(users.c.email, users.c.name, reset_tokens.c.expires_at > func.now())
            .join(reset_tokens, reset_tokens.c.user_id == users.c.id)
            .where(reset_tokens.c.id == token_id)
        ).first()
    if row is None or not row[2]:
        return  # token used, expired or user deleted: a stale reset link helps nobody
    deliver(job, row.email, "password_reset")


# -- user deletion ------------------------------------------------------------------------------


class StorageThrottled(Exception):
    """The object store asked us to slow down (a transient failure)."""


@pool.task(queue="user_deletion", max_attempts=5, timeout=60, backoff=QUICK_BACKOFF)
def delete_user(job: Job, user_id: int) -> None:
    """Delete a user from every store, one durable step per store: a retry replays the steps
    that finished and resumes at the first one that did not. A step's deletes, its row in the
    demo's own ledger and the step's record commit in one transaction (``step(conn=)``)."""
    for step in DELETION_STEPS:
        with pool.engine.begin() as conn:
            job.step(step, lambda step=step: _deletion_step(conn, job, user_id, step), conn=conn)


def _deletion_step(conn: Connection, job: Job, user_id: int, step: str) -> str:
    STEP_FUNCTIONS[step](conn, user_id)
    conn.execute(
        insert(deletion_steps).values(
            job_id=job.id, user_id=user_id, attempt=job.attempt, step=step
        )
    )
    return "deleted"


def _delete_sessions(conn: Connection, user_id: int) -> None:
    """Log the user out everywhere: sessions, API tokens, pending password resets."""
    for table in (sessions, api_tokens, reset_tokens):
        conn.execute(delete(table).where(table.c.user_id == user_id))


def _delete_posts(conn: Connection, user_id: int) -> None:
    conn.execute(delete(posts).where(posts.c.user_id == user_id))


def _delete_uploads(conn: Connection, user_id: int) -> None:
    """Object storage has no transactions: delete object by object (slow), each forgotten in a
    transaction of its own (a re-run finds only what is left), not in the step's ``conn``."""
    keys = (
        conn.execute(
            select(uploads.c.id).where(uploads.c.user_id == user_id).order_by(uploads.c.id)
        )
        .scalars()
        .all()
    )
    rng = random.Random()
    for upload_id in keys:
        time.sleep(rng.uniform(0.05, 0.2))  # DELETE https://storage.example.com/…
        if rng.random() < 0.04:
            raise StorageThrottled("503 SlowDown: reduce your request rate")
        with pool.engine.begin() as conn:
            conn.execute(delete(uploads).where(uploads.c.id == upload_id))


def _delete_account(conn: Connection, user_id: int) -> None:
    conn.execute(delete(users).where(users.c.id == user_id))
    conn.execute(insert(audit_log).values(event="account deleted"))


STEP_FUNCTIONS = {
    "sessions": _delete_sessions,
    "posts": _delete_posts,
    "uploads": _delete_uploads,
    "account": _delete_account,
}


# -- data export: a step, a sleep, a wait for a signal, a step ---------------------------------


@pool.task(queue="user_deletion", max_attempts=5, timeout=60, backoff=QUICK_BACKOFF)
def export_data(job: Job, user_id: int) -> None:
    """Collect a user's data, let it cool off, wait for support's approval, deliver it once."""
    archive = job.step("collect", lambda: _collect(job, user_id))
    job.sleep("cool_off", EXPORT_COOL_OFF)  # pending again in a second: no worker held
    approval = job.wait_for(f"export_approved:{user_id}", timeout=600)  # state waiting
    with pool.engine.begin() as conn:  # the link recorded and the job done: together, once
        _deliver(conn, job, user_id, archive, approval["by"])
        job.complete_in(conn, result={"user_id": user_id, **archive})
    return None  # not written: the job is already done


def _collect(job: Job, user_id: int) -> dict[str, int]:
    with pool.engine.begin() as conn:
        counts = remaining_rows(conn, user_id)
        conn.execute(
            insert(deletion_steps).values(
                job_id=job.id, user_id=user_id, attempt=job.attempt, step="collect"
            )
        )
    return {"posts": counts["posts"], "uploads": counts["uploads"]}


def _deliver(conn: Connection, job: Job, user_id: int, archive: dict[str, int], by: str) -> None:
    """Record the download link, in the transaction that ends the job (``complete_in``): a
    crash before its commit leaves neither, after it the job is done, so it is never sent
    twice (the primary key on the job would refuse a second one)."""
    conn.execute(insert(exports).values(job_id=job.id, user_id=user_id, approved_by=by, **archive))
    conn.execute(
        insert(deletion_steps).values(
            job_id=job.id, user_id=user_id, attempt=job.attempt, step="deliver"
        )
    )


def remaining_rows(conn: Connection, user_id: int) -> dict[str, int]:
    """What is left of a user in each store (all zeros once the deletion is complete)."""
    counts = {
        "sessions": select(func.count()).where(sessions.c.user_id == user_id),
        "api_tokens": select(func.count()).where(api_tokens.c.user_id == user_id),
        "reset_tokens": select(func.count()).where(reset_tokens.c.user_id == user_id),
        "posts": select(func.count()).where(posts.c.user_id == user_id),
        "uploads": select(func.count()).where(uploads.c.user_id == user_id),
        "account": select(func.count()).where(users.c.id == user_id),
    }
    return {store: conn.execute(query).scalar_one() for store, query in counts.items()}


def resumed_deletions(conn: Connection) -> int:
    """Deletion attempts whose first executed step was not the first step: they resumed at the
    first step that had not finished."""
    first = (
        select(
            deletion_steps.c.job_id,
            deletion_steps.c.attempt,
            func.min(deletion_steps.c.id).label("first_id"),
        )
        .group_by(deletion_steps.c.job_id, deletion_steps.c.attempt)
        .subquery()
    )
    stmt = (
        select(func.count())
        .select_from(first.join(deletion_steps, deletion_steps.c.id == first.c.first_id))
        .where(deletion_steps.c.step.in_(DELETION_STEPS[1:]))
    )
    return conn.execute(stmt).scalar_one()


#: Every job, whether still in the jobs table or moved to the history by the maintenance child
#: (finished jobs move there a minute after they end: docs/storage.md).
ALL_JOBS = (
    "(SELECT id, task, state, payload, steps FROM workerpool_jobs"
    " UNION ALL SELECT id, task, state, payload, steps FROM workerpool_jobs_history)"
)


def steps_run_again(conn: Connection) -> list[str]:
    """Steps whose work ran again after the step was recorded finished (both times from the
    database clock): a finished step must never run again (``job.step`` replays its value)."""
    rows = conn.execute(
        text(
            f"SELECT l.job_id, l.step FROM demo_deletion_steps l JOIN {ALL_JOBS} j"
            " ON j.id = l.job_id WHERE l.at > (j.steps -> l.step ->> 'finished_at')::timestamptz"
        )
    ).all()
    return [f"#{job_id} {step}" for job_id, step in rows]


def export_report(conn: Connection) -> dict[str, int]:
    """Exports delivered, and how they got their approval: sent before the job waited (kept,
    read at once) or after (the job waited, then was woken)."""
    row = conn.execute(
        text(
            "SELECT count(*) FILTER (WHERE state = 'done'),"
            " count(*) FILTER (WHERE (steps -> approval ->> 'started_at')::timestamptz"
            "   < (steps -> approval ->> 'finished_at')::timestamptz),"
            " count(*) FILTER (WHERE state <> 'done')"
            f" FROM {ALL_JOBS} AS j, LATERAL (SELECT 'export_approved:' || (payload ->> 'user_id')"
            "   AS approval) AS a WHERE task = 'export_data'"
        )
    ).one()
    delivered = conn.execute(select(func.count()).select_from(exports)).scalar_one()
    return {"done": row[0], "waited": row[1], "unfinished": row[2], "delivered": delivered}


# -- read-outs for the demo's summary -----------------------------------------------------------


def user_ids_by_email(conn: Connection) -> dict[str, int]:
    return dict(conn.execute(select(users.c.email, users.c.id)).all())


def delivered_keys(conn: Connection) -> list[str]:
    """The provider's idempotency key of every email delivered (one entry per delivery)."""
    return list(conn.execute(select(inbox.c.idempotency_key)).scalars())


def replayed_requests(conn: Connection) -> int:
    """Requests the provider answered from its idempotency cache (sent before, not sent again)."""
    stmt = select(func.count()).where(provider_requests.c.status == 208)
    return conn.execute(stmt).scalar_one()
