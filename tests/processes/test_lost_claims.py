"""A claim commits without waiting for the WAL flush; PostgreSQL stopped in ``immediate`` mode
right after it loses it. Every job still ends done, and no write of the lost claim's run lands.

On a scratch cluster of our own (initdb + pg_ctl on a free port, as the chaos tool does: the
machine's shared server is never restarted) whose WAL writer waits 10 s between flushes, so an
unflushed commit is still in shared memory when the server stops. The lost claim leaves each
job pending with its attempt not counted: the same worker claiming it again would hold the very
lease (worker, attempt) the first run, still sleeping, writes its result under.
"""

from __future__ import annotations

import re
from collections import defaultdict

import pytest

from tests.apps.lost_claims import build
from tests.helpers.processes import kill_all, start_supervisor
from tests.helpers.waiting import wait_until
from workerpool.chaos.cluster import Cluster, stop_quietly, workspace
from workerpool.migrate import upgrade

JOBS = 4
SECONDS = 6.0  # a run outlasts the restart and the worker's reconnection


@pytest.fixture
def cluster():
    with workspace() as root:
        own = Cluster(root, "primary")
        own.initdb({"wal_writer_delay": "'10s'"})
        own.start()
        try:
            upgrade(own.url())
            yield own
        finally:
            stop_quietly(own)


def runs(path) -> list[tuple[int, int, str]]:
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [(int(job), int(attempt), token) for job, attempt, token in map(str.split, lines)]


def test_claims_lost_in_an_immediate_restart_run_again_and_their_first_run_never_lands(
        cluster, tmp_path):
    runs_file = tmp_path / "runs"
    pool = build(cluster.url())
    sup = start_supervisor("tests.apps.lost_claims:pool", cluster.url(), tmp_path,
                           TEST_RUNS_FILE=str(runs_file))
    try:
        sup.wait_running("held")
        # one commit: an enqueue after the claim would flush the claim's commit with its own
        ids = pool.enqueue_many([("hold", {"seconds": SECONDS})] * JOBS)
        wait_until(lambda: len(runs(runs_file)) == JOBS, 15, message="every job running")
        cluster.restart("immediate")

        rows = wait_until(lambda: _all_done(pool, ids), 60,
                          message=f"every job done\n{sup.log()}")
        by_job = defaultdict(list)
        for job_id, attempt, token in runs(runs_file):
            by_job[job_id].append((attempt, token))
        for job_id in ids:
            first, *later = by_job[job_id]
            # lost: the second run is on the same attempt, which a durable claim would have counted
            assert first[0] == 1 and later and later[-1][0] == 1, (job_id, by_job[job_id])
            attempts, result = rows[job_id]
            assert attempts == 1, (job_id, attempts)
            assert result == {"token": later[-1][1]}, (job_id, by_job[job_id], result)
        fenced = re.findall(r"outcome_fenced_out: outcome of job (\d+)", sup.log())
        assert sorted(map(int, fenced)) == sorted(ids), sup.log()
    finally:
        kill_all([sup])
        pool.dispose()


def _all_done(pool, ids) -> dict[int, tuple[int, object]] | None:
    with pool.engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT id, state, attempts, result FROM workerpool_jobs WHERE id = ANY(%(ids)s)",
            {"ids": ids}).all()
    if len(rows) == len(ids) and all(row.state == "done" for row in rows):
        return {row.id: (row.attempts, row.result) for row in rows}
    return None
