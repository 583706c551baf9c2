"""Tags against real PostgreSQL: every enqueue path stores them (one job, a keyed batch, the
COPY batch, a linked job), bad tags are refused by name with nothing written, the operator
filters (cancel, dead list/retry/purge, status counts) select by them, and the GIN index
serves the filter on a table big enough for the planner to care."""

from __future__ import annotations

import pytest

from workerpool import InvalidJob, WorkerPool, testing
from workerpool.model.errors import InvalidFilter
from workerpool.ops import dead, job_view
from workerpool.ops.dead import DeadFilter


@pytest.fixture
def app(pool: WorkerPool) -> WorkerPool:
    pool.queue("q")

    @pool.task(queue="q", max_attempts=1)
    def work(job):
        if job.payload.get("fail"):
            raise RuntimeError("boom")

    return pool


def tags_of(sql, job_id: int) -> list[str] | None:
    return sql("SELECT tags FROM workerpool_jobs WHERE id = %s", job_id)[0][0]


ODD = ["tenant:7", 'with "quote"', "back\\slash", "semi;colon space", "{brace},comma", "ünï"]


def test_every_enqueue_path_stores_the_tags(app, sql):
    one = app.enqueue("work", {}, tags=["tenant:7", "import"])
    untagged = app.enqueue("work", {})
    keyed = app.enqueue_many([("work", {"n": 1}, {"key": "k1", "tags": ODD})])[0]
    copied = app.enqueue_many([("work", {"n": 2}, {"tags": ODD}), ("work", {"n": 3})])
    linked = app.enqueue("work", {}, after=[one], tags=["child"])
    assert tags_of(sql, one) == ["tenant:7", "import"]
    assert tags_of(sql, untagged) is None
    assert tags_of(sql, keyed) == ODD
    assert tags_of(sql, copied[0]) == ODD and tags_of(sql, copied[1]) is None
    assert tags_of(sql, linked) == ["child"]


def test_repeated_tags_are_kept_once(app, sql):
    job_id = app.enqueue("work", {}, tags=("a", "b", "a"))
    assert tags_of(sql, job_id) == ["a", "b"]


@pytest.mark.parametrize(
    "tags",
    [
        "tenant:7",
        [""],
        ["  "],
        [7],
        [None],
        ["x" * 101],
        ["a\nb"],
        [f"t{i}" for i in range(21)],
        [],
        {"a": 1},
    ],
)
def test_bad_tags_are_refused_by_name_and_nothing_is_written(app, sql, tags):
    with pytest.raises(InvalidJob, match="tag"):
        app.enqueue("work", {}, tags=tags)
    with pytest.raises(InvalidJob, match="tag"):
        app.enqueue_many([("work", {}), ("work", {}, {"tags": tags})])
    assert sql("SELECT count(*) FROM workerpool_jobs") == [(0,)]


def test_cancel_by_tag_takes_only_the_live_jobs_carrying_every_tag(app, sql):
    both = app.enqueue("work", {}, tags=["tenant:7", "import"])
    other_tenant = app.enqueue("work", {}, tags=["tenant:8", "import"])
    only_tenant = app.enqueue("work", {}, tags=["tenant:7"])
    planned = app.cancel(tags=["tenant:7", "import"], dry_run=True)
    assert list(planned.verdicts) == [both]
    assert sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'cancelled'") == [(0,)]
    result = app.cancel(tags=["tenant:7"], reason="tenant offboarded")
    assert sorted(result.cancelled) == sorted([both, only_tenant])
    assert sql("SELECT state FROM workerpool_jobs WHERE id = %s", other_tenant) == [("pending",)]


@pytest.mark.parametrize("tags", ["tenant:7", [""], [3]])
def test_a_bad_tag_filter_is_refused_and_nothing_is_cancelled(app, sql, tags):
    app.enqueue("work", {}, tags=["tenant:7"])
    with pytest.raises(InvalidFilter, match="tag"):
        app.cancel(tags=tags)
    with pytest.raises(InvalidFilter, match="tag"):
        DeadFilter(tags=tags)
    assert sql("SELECT state FROM workerpool_jobs") == [("pending",)]


def test_dead_list_retry_and_purge_filter_by_tag(app, sql):
    doomed = app.enqueue("work", {"fail": True}, tags=["import", "tenant:7"])
    other = app.enqueue("work", {"fail": True}, tags=["import", "tenant:8"])
    testing.drain(app, "q")
    page = dead.list_dead(app, DeadFilter(tags=("tenant:7",)))
    assert [row.id for row in page.jobs] == [doomed] and page.jobs[0].tags == ["import", "tenant:7"]
    retried = dead.retry(app, all_matching=True, filters=DeadFilter(tags=("tenant:7",)))
    assert retried.ids == [doomed]
    assert sql("SELECT id, state FROM workerpool_jobs ORDER BY id") == [
        (doomed, "pending"),
        (other, "dead"),
    ]
    sql("UPDATE workerpool_jobs SET finished_at = now() - interval '40 days' WHERE id = %s", other)
    purged = dead.purge(app, dead.parse_duration("30d"), DeadFilter(tags=("tenant:7",)))
    assert purged.count == 0
    purged = dead.purge(app, dead.parse_duration("30d"), DeadFilter(tags=("tenant:8",)))
    assert purged.count == 1


def test_status_counts_the_tagged_jobs_by_queue_and_state(app, sql):
    for _ in range(3):
        app.enqueue("work", {}, tags=["import"])
    app.enqueue("work", {"fail": True}, tags=["import"])
    app.enqueue("work", {}, tags=["other"])
    sql(
        "UPDATE workerpool_jobs SET state = 'dead', dead_reason = 'exhausted',"
        " finished_at = now(), attempts = 1 WHERE payload ? 'fail'"
    )
    with app.engine.connect() as conn:
        data = job_view.tagged(conn, ["import"])
    assert data == {
        "tags": ["import"],
        "queues": {"q": {"dead": 1, "pending": 3}},
        "lower_bound": False,
    }


def test_the_tag_filter_is_served_by_the_gin_index(app, sql):
    """50 000 untagged rows and a handful tagged: the plan reads the tags index with the
    containment as its condition (not merely the partial index's predicate, then a filter)."""
    sql(
        "INSERT INTO workerpool_jobs (queue, task) SELECT 'q', 'work'"
        " FROM generate_series(1, 50000)"
    )
    sql(
        "INSERT INTO workerpool_jobs (queue, task, tags) SELECT 'q', 'work',"
        " ARRAY['tenant:' || (g % 500)] FROM generate_series(1, 5000) g"
    )
    sql("ANALYZE workerpool_jobs")
    plan = "\n".join(
        row[0]
        for row in sql(
            "EXPLAIN SELECT id FROM workerpool_jobs WHERE tags @> %s::text[]", ["tenant:7"]
        )
    )
    assert "Index Scan on ix_workerpool_jobs_tags" in plan, plan
    assert "Index Cond: (tags @> '{tenant:7}'::text[])" in plan, plan
