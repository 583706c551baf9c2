"""`workerpool batch show` and the open batches of `workerpool status`, as an operator runs
them: real processes on a database holding one open and one finished batch."""

from __future__ import annotations

import json

from tests.helpers.cli import run_cli
from workerpool import WorkerPool, testing


def seeded(db_url) -> tuple[int, int]:
    pool = WorkerPool(db_url)
    pool.queue("q")
    pool.task(queue="q", name="member")(lambda job: job.payload["n"])
    pool.task(queue="q", name="report")(lambda job: None)
    try:
        with pool.batch(on_complete="report", key="finished:1") as finished:
            finished.enqueue_many([("member", {"n": n}) for n in range(3)])
        testing.drain(pool)
        with pool.batch(on_complete="report", key="open:1") as still_open:
            still_open.enqueue_many([("member", {"n": n}) for n in range(4)])
        return finished.id, still_open.id  # type: ignore[return-value]
    finally:
        pool.dispose()


def test_batch_show_prints_progress_outcome_and_callbacks(db_url, tmp_path):
    finished, still_open = seeded(db_url)
    shown = run_cli("batch", "show", str(finished), url=db_url, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith(f"batch {finished} (key finished:1): finished ")
    assert "success (fired by outcome)" in lines[0]
    assert lines[1] == f"  members 3  [{'#' * 30}] 100% ended"
    assert "callback jobs: " in lines[-1] and "(done)" in lines[-1]
    data = json.loads(
        run_cli("batch", "show", str(still_open), "--json", url=db_url, cwd=tmp_path).stdout
    )
    assert (data["total"], data["pending"], data["finished"], data["callbacks"]) == (
        4,
        4,
        False,
        [],
    )


def test_batch_show_refuses_an_unknown_batch_in_one_line(db_url, tmp_path):
    shown = run_cli("batch", "show", "999", url=db_url, cwd=tmp_path)
    assert shown.returncode != 0
    assert shown.stderr.strip().splitlines() == [
        "workerpool batch: no batch 999 (never opened, rolled back, or pruned after the retention)"
    ]


def test_status_lists_the_open_batches(db_url, tmp_path):
    _, still_open = seeded(db_url)
    data = json.loads(run_cli("status", "--json", url=db_url, cwd=tmp_path).stdout)
    assert data["batches"]["open"] == 1
    assert [b["id"] for b in data["batches"]["oldest"]] == [still_open]
    text = run_cli("status", url=db_url, cwd=tmp_path).stdout
    assert "OPEN BATCHES (1)" in text and f"  {still_open:<8} [" in text
