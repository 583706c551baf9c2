"""Progress and attempt logs against real PostgreSQL, run by a real in-process Worker: progress
is checked, throttled (the last value still lands), fenced on the lease; a queue with
``capture_logs`` keeps each attempt's records (threads and asyncio alike), bounded, and one
without keeps nothing."""

from __future__ import annotations

import asyncio
import logging
import threading
from contextlib import contextmanager

import pytest

from tests.helpers.waiting import wait_until
from tests.helpers.workers import running
from workerpool import Backoff, InvalidProgress, LeaseLost, testing
from workerpool.runtime.worker import joblogs

log = logging.getLogger("tests.handler")


@pytest.fixture(autouse=True)
def info_level():
    root = logging.getLogger()
    before = root.level
    root.setLevel(logging.INFO)
    yield
    root.setLevel(before)


def row(sql, job_id: int) -> tuple:
    return sql("SELECT state, progress FROM workerpool_jobs WHERE id = %s", job_id)[0]


def logs(sql, job_id: int) -> list[tuple]:
    return sql(
        "SELECT attempt, records, dropped FROM workerpool_job_logs WHERE job_id = %s ORDER BY id",
        job_id,
    )


def done(sql, job_id: int) -> bool:
    return row(sql, job_id)[0] in ("done", "dead")


# -- progress ------------------------------------------------------------------------------------


def test_progress_is_throttled_and_the_last_value_lands(pool, sql):
    pool.queue("p", poll_interval=0.05)
    first_written = threading.Event()
    seen: list = []

    @pool.task(queue="p")
    def count(job):
        job.progress(0.1)
        seen.append(row(sql, job.id)[1])  # the first report is written at once
        for done_count in range(2, 11):
            job.progress({"done": done_count, "of": 10})
        seen.append(row(sql, job.id)[1])  # within the second: held back
        first_written.set()

    job_id = pool.enqueue("count", {})
    with running(pool, "p"):
        wait_until(lambda: done(sql, job_id), 20, message="the job finished")
    assert seen[0]["value"] == 0.1 and seen[0]["attempt"] == 1
    assert seen[1]["value"] == 0.1
    state, progress = row(sql, job_id)
    assert state == "done" and progress["value"] == {"done": 10, "of": 10}


@pytest.mark.parametrize(
    "value",
    [1.5, -0.1, float("nan"), True, None, "half", [1], {"blob": "x" * 5000}, {"bad": {1, 2}}],
)
def test_bad_progress_is_refused_by_name_and_nothing_is_written(pool, sql, value):
    pool.queue("p")
    raised: list = []

    @pool.task(queue="p", max_attempts=1)
    def bad(job):
        try:
            job.progress(value)
        except InvalidProgress as exc:
            raised.append(exc)
            raise

    job_id = pool.enqueue("bad", {})
    testing.drain(pool, "p")
    assert raised and "progress" in str(raised[0])
    assert row(sql, job_id) == ("dead", None)


def test_a_stale_owner_cannot_write_progress(pool, sql):
    pool.queue("slow", poll_interval=0.05, stale_after=1.0, concurrency=2)
    first_run, resume = threading.Event(), threading.Event()
    raised: list = []
    runs: list[int] = []

    @pool.task(queue="slow", backoff=Backoff(base=0, cap=0))
    def slow(job):
        runs.append(job.attempt)
        if len(runs) == 1:
            first_run.set()
            resume.wait(30)
            try:
                job.progress(0.9)
            except LeaseLost as exc:
                raised.append(exc)
                raise
            return
        job.progress(0.5)

    job_id = pool.enqueue("slow", {})
    with running(pool, "slow", renew_leases=False):
        assert first_run.wait(10)
        with running(pool, "slow"):
            wait_until(lambda: row(sql, job_id)[0] == "done", 30, message="the second run")
        resume.set()
        wait_until(lambda: raised, 10, message="the stale owner's progress refused")
    assert row(sql, job_id)[1]["value"] == 0.5


def test_progress_works_in_the_inline_drain(pool, sql):
    pool.queue("p")

    @pool.task(queue="p")
    def step(job):
        job.progress({"phase": "copy"})

    job_id = pool.enqueue("step", {})
    testing.drain(pool, "p")
    assert row(sql, job_id)[1]["value"] == {"phase": "copy"}


# -- logs ----------------------------------------------------------------------------------------


def test_each_attempt_keeps_its_own_records(pool, sql):
    pool.queue("l", poll_interval=0.05, capture_logs=True)

    @pool.task(queue="l", backoff=Backoff(base=0, cap=0), max_attempts=2)
    def flaky(job):
        log.info("attempt %d begins", job.attempt)
        if job.attempt == 1:
            log.warning("upstream said no")
            raise ConnectionError("503")
        log.info("all good")

    job_id = pool.enqueue("flaky", {})
    other = threading.Thread(target=lambda: log.info("not a job's record"))
    with running(pool, "l"):
        other.start()
        wait_until(lambda: row(sql, job_id)[0] == "done", 20, message="the retry finished")
    other.join()
    kept = logs(sql, job_id)
    assert [attempt for attempt, _, _ in kept] == [1, 2]
    assert [r["message"] for r in kept[0][1]] == ["attempt 1 begins", "upstream said no"]
    assert [r["level"] for r in kept[0][1]] == ["INFO", "WARNING"]
    assert [r["message"] for r in kept[1][1]] == ["attempt 2 begins", "all good"]
    assert kept[1][1][0]["logger"] == "tests.handler" and kept[1][2] == 0


def test_async_handlers_running_together_keep_their_own_records(pool, sql):
    pool.queue("a", poll_interval=0.05, capture_logs=True, concurrency=4)

    @pool.task(queue="a")
    async def fetch(job):
        for step in range(3):
            log.info("job %s step %d", job.payload["n"], step)
            await asyncio.sleep(0.01)

    ids = pool.enqueue_many([("fetch", {"n": n}) for n in range(4)])
    with running(pool, "a"):
        wait_until(lambda: all(done(sql, i) for i in ids), 20, message="all four done")
    for n, job_id in enumerate(ids):
        [(_, records, _)] = logs(sql, job_id)
        assert [r["message"] for r in records] == [f"job {n} step {s}" for s in range(3)]


def test_the_bound_keeps_the_first_records_and_counts_the_rest(pool, sql):
    pool.queue("l", poll_interval=0.05, capture_logs=True)

    @pool.task(queue="l")
    def chatty(job):
        for i in range(joblogs.MAX_RECORDS + 25):
            log.info("line %d", i)
        log.info("x" * (joblogs.MAX_MESSAGE + 100))

    job_id = pool.enqueue("chatty", {})
    with running(pool, "l"):
        wait_until(lambda: done(sql, job_id), 20, message="the job finished")
    [(_, records, dropped)] = logs(sql, job_id)
    assert len(records) == joblogs.MAX_RECORDS and dropped == 26
    assert records[-1]["message"] == f"line {joblogs.MAX_RECORDS - 1}"


@contextmanager
def without_pytest_log_capture():
    """pytest's own capture would carry a lone surrogate into its report, which pytest-xdist
    then fails to send between its processes."""
    root = logging.getLogger()
    theirs = [h for h in root.handlers if type(h).__module__.startswith("_pytest")]
    for handler in theirs:
        root.removeHandler(handler)
    try:
        yield
    finally:
        for handler in theirs:
            root.addHandler(handler)


def test_a_nul_or_a_lone_surrogate_logged_is_stored_and_fails_no_outcome(pool, sql):
    """Neither PostgreSQL text nor jsonb holds a NUL, and a lone surrogate is not UTF-8: the
    records are made storable, the outcomes written, and the healthy jobs behind them run."""
    pool.queue("l", poll_interval=0.05, capture_logs=True, concurrency=2)

    @pool.task(queue="l", max_attempts=1)
    def odd(job):
        log.warning("nul %s here", "\x00")
        log.warning("surrogate %s here", "\ud800")
        logging.getLogger("tests.\x00name\udcff").error("odd logger")
        try:
            raise ValueError("bad \x00 and \udc80")
        except ValueError:
            log.exception("caught")
        if job.payload["fail"]:
            raise RuntimeError("failing \x00 too")

    @pool.task(queue="l")
    def healthy(job):
        log.info("fine")

    odd_ids = pool.enqueue_many([("odd", {"fail": n % 2 == 1}) for n in range(3)])
    fine = pool.enqueue_many([("healthy", {})] * 3)
    with without_pytest_log_capture(), running(pool, "l"):
        wait_until(
            lambda: all(done(sql, i) for i in odd_ids + fine), 20, message="every job finished"
        )
    assert [row(sql, i)[0] for i in odd_ids + fine] == ["done", "dead", "done"] + ["done"] * 3
    [(_, records, _)] = logs(sql, odd_ids[0])
    assert [r["message"] for r in records[:2]] == ["nul \\x00 here", "surrogate ? here"]
    assert records[2]["logger"] == "tests.\\x00name?"
    caught = records[3]["message"]
    assert caught.startswith("caught\n") and "bad \\x00 and ?" in caught


def test_a_queue_without_capture_keeps_nothing(pool, sql):
    pool.queue("quiet", poll_interval=0.05)

    @pool.task(queue="quiet")
    def talk(job):
        log.warning("said, not kept")

    job_id = pool.enqueue("talk", {})
    with running(pool, "quiet"):
        wait_until(lambda: done(sql, job_id), 20, message="the job finished")
    assert logs(sql, job_id) == []


def test_logs_stay_with_a_moved_job_go_with_a_purged_one_and_age_out_but_a_dead_jobs(pool, sql):
    from workerpool.ops import dead
    from workerpool.runtime.maintenance import Maintenance

    pool.queue("l", capture_logs=True)
    pool.maintenance(history_delay=0, retention=3600)

    @pool.task(queue="l")
    def talk(job):
        log.info("kept")
        if job.payload.get("fail"):
            raise ValueError("no")

    moved = pool.enqueue("talk", {})
    dying = pool.enqueue("talk", {"fail": True}, max_attempts=1)
    purged = pool.enqueue("talk", {"fail": True}, max_attempts=1)
    testing.drain(pool, "l")
    maintenance = Maintenance(pool.registry, pool.engine, worker_id="m")
    assert maintenance.keep_history() == 1
    assert sql("SELECT count(*) FROM workerpool_jobs_history WHERE id = %s", moved) == [(1,)]
    assert len(logs(sql, moved)) == 1  # the move keeps them (no cascade from the jobs table)

    dead.purge(pool, 0, dead.DeadFilter(ids=(purged,)))
    assert logs(sql, purged) == []
    sql("UPDATE workerpool_job_logs SET written_at = now() - interval '2 hours'")
    assert maintenance.prune_records() == 1
    assert logs(sql, moved) == [] and len(logs(sql, dying)) == 1  # a dead job's stay


def test_capture_logs_must_be_a_bool(pool):
    from workerpool import ConfigError

    with pytest.raises(ConfigError, match="capture_logs"):
        pool.queue("l", capture_logs="yes")
