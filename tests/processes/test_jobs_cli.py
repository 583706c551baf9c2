"""`workerpool status --job/--tag`, `cancel --tag` and `dead ... --tag` as an operator runs
them (real processes) on seeded rows: tags, progress and attempt logs shown, tag filters
applied, bad tags refused with one line and nothing changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.cli import run_cli

SEED = """
INSERT INTO workerpool_jobs (id, queue, task, state, tags, progress, attempts) VALUES
  (1, 'email', 'send', 'pending', ARRAY['tenant:7', 'import'], NULL, 0),
  (2, 'email', 'send', 'pending', ARRAY['tenant:8', 'import'], NULL, 0),
  (3, 'email', 'send', 'done', ARRAY['tenant:7'],
   '{"value": {"done": 4, "of": 10}, "attempt": 2, "at": "2026-12-01T10:00:00+00:00"}', 2),
  (4, 'email', 'send', 'pending', NULL, NULL, 0);
INSERT INTO workerpool_jobs (id, queue, task, state, tags, dead_reason, finished_at, attempts,
                             max_attempts)
VALUES (5, 'email', 'send', 'dead', ARRAY['tenant:7'], 'exhausted', now(), 1, 1),
       (6, 'email', 'send', 'dead', ARRAY['tenant:8'], 'exhausted', now(), 1, 1);
INSERT INTO workerpool_job_logs (job_id, attempt, records, dropped) VALUES
  (3, 1, '[{"at": "2026-12-01T09:59:00+00:00", "level": "WARNING", "logger": "app",
            "message": "upstream said no"}]', 0),
  (3, 2, '[{"at": "2026-12-01T10:00:00+00:00", "level": "INFO", "logger": "app",
            "message": "copied 4 of 10"}]', 3);
"""


APP = """
from workerpool import WorkerPool
pool = WorkerPool()
pool.queue("email")

@pool.task(queue="email")
def send(job):
    pass
"""


@pytest.fixture
def seeded(db_url, sql, tmp_path: Path):
    sql(SEED)
    (tmp_path / "tagsapp.py").write_text(APP)
    return db_url


def ok(out) -> str:
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_status_job_shows_tags_progress_and_each_attempts_logs(seeded, tmp_path):
    text = ok(run_cli("status", "--job", "3", url=seeded, cwd=tmp_path))
    assert "TAGS tenant:7" in text
    assert 'PROGRESS {"of":10,"done":4} (attempt 2' in text  # as jsonb orders the keys
    assert "LOGS of attempt 1" in text and "WARNING app: upstream said no" in text
    assert "LOGS of attempt 2" in text and "INFO app: copied 4 of 10" in text
    assert "truncated: 3 more record(s) not kept" in text
    data = json.loads(ok(run_cli("status", "--job", "3", "--json", url=seeded, cwd=tmp_path)))
    assert data["tags"] == ["tenant:7"] and data["progress"]["value"] == {"done": 4, "of": 10}
    assert [log["attempt"] for log in data["logs"]] == [1, 2]
    assert data["logs"][1]["dropped"] == 3


def test_status_tag_counts_the_jobs_carrying_every_tag(seeded, tmp_path):
    data = json.loads(
        ok(run_cli("status", "--tag", "tenant:7", "--json", url=seeded, cwd=tmp_path))
    )
    assert data["queues"] == {"email": {"dead": 1, "done": 1, "pending": 1}}
    text = ok(run_cli("status", "--tag", "tenant:7", "--tag", "import", url=seeded, cwd=tmp_path))
    assert "JOBS TAGGED tenant:7 + import" in text
    assert [line.split() for line in text.splitlines()[2:]] == [["email", "pending", "1"]]


def test_cancel_by_tag_dry_run_first_then_for_real(seeded, sql, tmp_path):
    text = ok(run_cli("cancel", "--tag", "import", "--dry-run", url=seeded, cwd=tmp_path))
    assert "job 1: dry run: would be cancelled" in text and "job 2:" in text
    assert sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'cancelled'") == [(0,)]
    ok(run_cli("cancel", "--tag", "import", "--tag", "tenant:7", url=seeded, cwd=tmp_path))
    assert sql("SELECT id FROM workerpool_jobs WHERE state = 'cancelled'") == [(1,)]


def test_dead_list_and_retry_filter_by_tag(seeded, sql, tmp_path):
    listed = json.loads(
        ok(run_cli("dead", "list", "--tag", "tenant:7", "--json", url=seeded, cwd=tmp_path))
    )
    assert [job["id"] for job in listed["jobs"]] == [5] and listed["jobs"][0]["tags"] == [
        "tenant:7"
    ]
    text = ok(
        run_cli(
            "dead",
            "retry",
            "--all",
            "--tag",
            "tenant:8",
            "--app",
            "tagsapp:pool",
            url=seeded,
            cwd=tmp_path,
        )
    )
    assert "replayed 1 dead job" in text
    assert sql("SELECT id FROM workerpool_jobs WHERE state = 'dead'") == [(5,)]


@pytest.mark.parametrize(
    "args",
    [
        ("status", "--tag", ""),
        ("status", "--tag", "x" * 101),
        ("status", "--job", "3", "--tag", "a"),
        ("cancel", "--tag", " "),
        ("dead", "list", "--tag", ""),
        ("dead", "retry", "--all", "--tag", "a\tb"),
        ("dead", "purge", "--older-than", "1d", "--tag", ""),
    ],
)
def test_a_bad_tag_is_refused_with_one_line_and_nothing_changes(seeded, sql, tmp_path, args):
    before = sql("SELECT id, state FROM workerpool_jobs ORDER BY id")
    out = run_cli(*args, url=seeded, cwd=tmp_path)
    assert out.returncode != 0 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "tag" in lines[0], out.stderr
    assert sql("SELECT id, state FROM workerpool_jobs ORDER BY id") == before
