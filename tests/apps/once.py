"""The application of the effects-once process tests: ``charge`` writes a ledger row and ends
its job in the same transaction (``complete_in``); ``slow_charge`` first notes that it started
and naps (``ONCE_NAP`` seconds: the test freezes its process there); ``debit`` writes its
effect in a step recorded in the effect's transaction (``step(conn=)``) and naps after it on
its first attempt (the test SIGKILLs it there). The tables are made by the test (``TABLES``)."""

from __future__ import annotations

import os
import random
import time

from sqlalchemy import text

from workerpool import Backoff, Job, LeaseLost, WorkerPool

SHORT = {
    "drain_timeout": 1.0,
    "hang_timeout": float(os.environ.get("TEST_HANG", "10")),
    "poll_interval": 0.1,
}
TABLES = (
    "CREATE TABLE once_ledger (job_id bigint NOT NULL, attempt int NOT NULL,"
    " at timestamptz DEFAULT clock_timestamp())",
    "CREATE TABLE once_started (job_id bigint NOT NULL, attempt int NOT NULL, pid int NOT NULL)",
    "CREATE TABLE once_refused (job_id bigint NOT NULL, attempt int NOT NULL, error text)",
)
NAP = float(os.environ.get("ONCE_NAP", "0"))


def build(url: object = None) -> WorkerPool:
    pool = WorkerPool(url)  # default: $WORKERPOOL_DATABASE_URL
    pool.queue("once", concurrency=4, **SHORT)

    def effect(conn, job: Job) -> None:
        conn.execute(
            text("INSERT INTO once_ledger (job_id, attempt) VALUES (:j, :a)"),
            {"j": job.id, "a": job.attempt},
        )

    @pool.task(queue="once", max_attempts=25, backoff=Backoff(base=0, cap=0))
    def charge(job: Job) -> None:
        time.sleep(random.uniform(0, 0.02))  # spread the deaths over the handler's life
        with pool.engine.begin() as conn:
            effect(conn, job)
            job.complete_in(conn, result={"charged": job.id})

    @pool.task(queue="once", max_attempts=5, backoff=Backoff(base=0, cap=0))
    def slow_charge(job: Job) -> None:
        with pool.engine.begin() as conn:
            conn.execute(
                text("INSERT INTO once_started VALUES (:j, :a, :p)"),
                {"j": job.id, "a": job.attempt, "p": os.getpid()},
            )
        time.sleep(NAP)  # the test freezes this process here
        try:
            with pool.engine.begin() as conn:
                effect(conn, job)
                job.complete_in(conn, result={"attempt": job.attempt})
        except LeaseLost as lost:  # its block rolled back: say so where the test can read it
            with pool.engine.begin() as conn:
                conn.execute(
                    text("INSERT INTO once_refused VALUES (:j, :a, :e)"),
                    {"j": job.id, "a": job.attempt, "e": f"{type(lost).__name__}: {lost}"},
                )
            raise

    @pool.task(queue="once", max_attempts=5, backoff=Backoff(base=0, cap=0))
    def debit(job: Job) -> str:
        with pool.engine.begin() as conn:
            job.step("debit", lambda: effect(conn, job) or "debited", conn=conn)
        if job.attempt == 1:
            time.sleep(120)  # the test SIGKILLs this process here
        return "done"

    return pool


pool = build()
