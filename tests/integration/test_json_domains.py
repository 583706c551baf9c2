"""The jobs table's json rules (payload an object within 1 MiB, errors an array, steps an
object, result within 1 MiB) are domains: PostgreSQL checks them when a value is written, and
not on every UPDATE that carries the value over, as it would a table's CHECK (migration 0024)."""

from __future__ import annotations

import psycopg
import pytest

from tests.helpers.waiting import wait_until
from tests.helpers.workers import running
from workerpool import Backoff, WorkerPool

BIG = 1024 * 1024  # model.payload.PAYLOAD_HARD_LIMIT


def one_job(sql) -> int:
    return sql("INSERT INTO workerpool_jobs (queue, task) VALUES ('q', 't') RETURNING id")[0][0]


@pytest.mark.parametrize(
    ("assignment", "constraint"),
    [
        ("payload = '[1]'", "ck_workerpool_payload_object"),
        (f"payload = jsonb_build_object('pad', repeat('x', {BIG}))", "ck_workerpool_payload_size"),
        ("errors = '{}'", "ck_workerpool_errors_array"),
        ("steps = '[]'", "ck_workerpool_steps_object"),
        (f"result = to_jsonb(repeat('x', {BIG}))", "ck_workerpool_result_size"),
    ],
)
def test_a_value_written_past_the_client_is_refused_by_its_rule(sql, assignment, constraint):
    job_id = one_job(sql)
    with pytest.raises(psycopg.errors.CheckViolation, match=constraint):
        sql(f"UPDATE workerpool_jobs SET {assignment} WHERE id = %s", job_id)
    column = assignment.split(" = ")[0]
    with pytest.raises(psycopg.errors.CheckViolation, match=constraint):
        sql(
            f"INSERT INTO workerpool_jobs (queue, task, {column})"
            f" SELECT 'q', 't', {assignment.split(' = ', 1)[1]}"
        )
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(1,)]


def test_no_check_of_the_jobs_table_reads_a_json_column(sql):
    checks = sql(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conrelid = 'workerpool_jobs'::regclass AND contype = 'c'"
        " AND pg_get_constraintdef(oid) ~ '(payload|errors|steps|result)'"
    )
    assert checks == []


def test_a_job_runs_fails_and_ends_without_its_payload_or_errors_checked_again(
    pool: WorkerPool, sql
):
    """A rule that the stored values break, added NOT VALID (as the migration adds the real
    ones): the claim, the failure's write, the next claim and the completion all pass, since
    none of them writes the payload; a new payload is still checked."""
    pool.queue("q", poll_interval=0.05)
    attempts: list[int] = []

    @pool.task(queue="q", name="flaky", backoff=Backoff(base=0, cap=0, jitter=0))
    def flaky(job):
        attempts.append(job.attempt)
        if job.attempt == 1:
            raise RuntimeError("first attempt fails")

    job_id = pool.enqueue("flaky", {"marked": True})
    sql(
        "ALTER DOMAIN workerpool_payload ADD CONSTRAINT ck_test_unmarked"
        " CHECK (NOT VALUE ? 'marked') NOT VALID"
    )
    try:
        with running(pool, "q"):
            wait_until(
                lambda: (
                    sql("SELECT state FROM workerpool_jobs WHERE id = %s", job_id) == [("done",)]
                ),
                30,
                message="the job is done",
            )
        with pytest.raises(psycopg.errors.CheckViolation, match="ck_test_unmarked"):
            sql("UPDATE workerpool_jobs SET payload = payload || '{}' WHERE id = %s", job_id)
    finally:
        sql("ALTER DOMAIN workerpool_payload DROP CONSTRAINT ck_test_unmarked")
    assert attempts == [1, 2]
    assert sql("SELECT jsonb_array_length(errors) FROM workerpool_jobs WHERE id = %s", job_id) == [
        (1,)
    ]
