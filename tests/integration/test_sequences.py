"""Sequences (``sequence="name"``), on real PostgreSQL: one job at a time in enqueue order, a
retrying job holds its sequence, a dead or cancelled one releases it (or blocks it, with
``on_failure="block"``), concurrent enqueuers serialize, bad names are refused."""

from __future__ import annotations

import threading

import pytest

from tests.helpers.db import job_state
from workerpool import Backoff, Permanent, WorkerPool, testing
from workerpool import sql as queries
from workerpool.dead import purge, retry
from workerpool.model.attempt import Outcome
from workerpool.model.errors import InvalidDependency
from workerpool.model.states import OutcomeKind
from workerpool.runtime.worker.outcomes import record_many

LATER = Backoff(base=60, cap=60, jitter=0)  # a retry waits (drain's retries="now" runs it)
RAN: list[int] = []
FAIL: set[int] = set()


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    RAN.clear()
    FAIL.clear()
    pool.queue("q")

    @pool.task(queue="q", max_attempts=3, backoff=LATER)
    def apply(job):
        RAN.append(job.id)
        if job.payload.get("n") in FAIL:
            raise RuntimeError("flaky")

    @pool.task(queue="q", max_attempts=1)
    def fatal(job):
        RAN.append(job.id)
        raise Permanent("no")

    @pool.task(queue="q", max_attempts=1, on_failure="block")
    def fatal_blocking(job):
        RAN.append(job.id)
        if job.payload.get("fail", True):
            raise Permanent("no")

    return pool


def states(sql, *ids: int) -> list[str]:
    return [job_state(sql, job_id) for job_id in ids]


def test_jobs_of_a_sequence_run_one_at_a_time_in_enqueue_order(app, sql):
    ids = [app.enqueue("apply", {"n": n}, sequence="customer:42") for n in range(4)]
    other = app.enqueue("apply", {"n": 9}, sequence="customer:7")
    assert states(sql, *ids, other) == ["pending", "waiting", "waiting", "waiting", "pending"]
    testing.drain(app)
    assert [job for job in RAN if job in ids] == ids
    assert states(sql, *ids) == ["done"] * 4
    after = app.enqueue("apply", {"n": 5}, sequence="customer:42")
    assert states(sql, after) == ["pending"]  # the line is empty: due at once


def test_a_retrying_job_holds_its_sequence(app, sql):
    FAIL.add(0)
    first = app.enqueue("apply", {"n": 0}, sequence="s")
    second = app.enqueue("apply", {"n": 1}, sequence="s")
    testing.drain(app)
    assert job_state(sql, first) == "failed"
    assert states(sql, second) == ["waiting"]
    FAIL.clear()
    sql("UPDATE workerpool_jobs SET run_at = now() WHERE id = %s", first)  # its backoff is over
    testing.drain(app)
    assert states(sql, first, second) == ["done", "done"]
    assert RAN.index(second) > max(i for i, job in enumerate(RAN) if job == first)


def test_a_dead_job_releases_its_sequence(app, sql):
    first = app.enqueue("fatal", {}, sequence="s")
    second = app.enqueue("apply", {}, sequence="s")
    testing.drain(app)
    assert states(sql, first, second) == ["dead", "done"]  # released, not cancelled


def test_a_cancelled_job_releases_its_sequence(app, sql):
    first = app.enqueue("apply", {}, sequence="s", delay=3600)
    second = app.enqueue("apply", {}, sequence="s")
    third = app.enqueue("apply", {}, sequence="s")
    app.cancel([second])
    assert states(sql, second, third) == ["cancelled", "waiting"]  # first still holds the line
    fourth = app.enqueue("apply", {}, sequence="s")
    app.cancel([third])
    assert states(sql, third, fourth) == ["cancelled", "waiting"]
    app.cancel([first])
    assert states(sql, fourth) == ["pending"]


def test_on_failure_block_stops_the_line_until_a_replay(app, sql):
    first = app.enqueue("fatal_blocking", {}, sequence="s")
    second = app.enqueue("apply", {}, sequence="s")
    testing.drain(app)
    assert states(sql, first, second) == ["dead", "waiting"]
    third = app.enqueue("apply", {}, sequence="s")  # joins the blocked line
    assert states(sql, third) == ["waiting"]
    sql("""UPDATE workerpool_jobs SET payload = '{"fail": false}' WHERE id = %s""", first)
    retry(app, [first])
    testing.drain(app)
    assert states(sql, first, second, third) == ["done", "done", "done"]
    assert RAN[-3:] == [first, second, third]


def test_a_replayed_job_waits_for_its_line_instead_of_running_beside_it(app, sql):
    """The dead job released its line and the next job runs: replayed, it goes to the end of
    the line (waiting), not beside the running one; a job enqueued after the replay waits
    behind it. Each runs alone, in that order."""
    first = app.enqueue("fatal", {}, sequence="s")
    second = app.enqueue("apply", {}, sequence="s")
    testing.drain(app, max_jobs=1)
    assert states(sql, first, second) == ["dead", "pending"]
    sql(
        "UPDATE workerpool_jobs SET state = 'processing', attempts = 1, claimed_by = 'w',"
        " claimed_at = now() WHERE id = %s",
        second,
    )  # the line runs it now
    retry(app, [first])
    assert states(sql, first) == ["waiting"]
    third = app.enqueue("apply", {}, sequence="s")
    assert states(sql, third) == ["waiting"]
    with app.engine.begin() as conn:
        record_many(conn, "w", [(queries.Lease(second, 1, "w"), Outcome(OutcomeKind.DONE))])
    assert states(sql, second, first, third) == ["done", "pending", "waiting"]
    sql("UPDATE workerpool_jobs SET task = 'apply' WHERE id = %s", first)  # it works now
    testing.drain(app)
    assert states(sql, first, third) == ["done", "done"]
    assert RAN[-2:] == [first, third]


def test_a_replayed_job_with_nothing_of_its_line_live_runs_at_once(app, sql):
    first = app.enqueue("fatal", {}, sequence="s")
    second = app.enqueue("apply", {}, sequence="s")
    testing.drain(app)
    assert states(sql, first, second) == ["dead", "done"]
    retry(app, [first])
    assert states(sql, first) == ["pending"]


def test_on_failure_block_goes_on_once_the_dead_job_is_purged(app, sql):
    first = app.enqueue("fatal_blocking", {}, sequence="s")
    second = app.enqueue("apply", {}, sequence="s")
    testing.drain(app)
    assert states(sql, second) == ["waiting"]
    assert purge(app, 0).count == 1
    assert states(sql, second) == ["pending"]
    assert first not in [row[0] for row in sql("SELECT id FROM workerpool_jobs")]


def test_concurrent_enqueuers_of_one_sequence_build_one_line(app, sql):
    errors: list[BaseException] = []

    def enqueue(offset: int) -> None:
        try:
            for n in range(15):
                app.enqueue("apply", {"n": offset + n}, sequence="s", delay=3600)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=enqueue, args=(k * 100,)) for k in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    ids = [row[0] for row in sql("SELECT id FROM workerpool_jobs ORDER BY id")]
    edges = sql(
        "SELECT job_id, parent_id FROM workerpool_job_dependencies"
        " WHERE kind = 'sequence' ORDER BY job_id"
    )
    assert edges == list(zip(ids[1:], ids[:-1], strict=True))  # each after the one before


@pytest.mark.parametrize("name", ["", "   ", 42, b"s", ["s"]])
def test_a_sequence_name_that_is_not_a_non_empty_string_is_refused(app, sql, name):
    with pytest.raises(InvalidDependency, match="sequence"):
        app.enqueue("apply", {}, sequence=name)
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(0,)]


def test_a_sequence_with_after_waits_for_both(app, sql):
    parent = app.enqueue("apply", {}, delay=3600)
    first = app.enqueue("apply", {}, sequence="s")
    second = app.enqueue("apply", {}, sequence="s", after=[parent])
    testing.drain(app)
    assert states(sql, first, second) == ["done", "waiting"]
    sql("UPDATE workerpool_jobs SET run_at = now() WHERE id = %s", parent)
    testing.drain(app)
    assert states(sql, second) == ["done"]


def test_the_plain_claim_statement_knows_nothing_of_sequences_or_dependencies():
    """Sequences cost the claim nothing: a sequenced job is an ordinary waiting dependent, so
    the claim statement is the one it was (compiled SQL compared with main's: same sha256)."""
    from sqlalchemy.dialects import postgresql

    from workerpool.sql.claim import claim_statement

    for alone in (False, True):
        stmt = claim_statement(queue="q", worker="w", limit=10, task_versions={"a": 1}, alone=alone)
        compiled = str(stmt.compile(dialect=postgresql.psycopg.dialect()))
        for word in ("sequence", "dependencies", "waiting", "workflow"):
            assert word not in compiled
