"""`workerpool status` and `workerpool dead ...` as an operator runs them, on a seeded database.

Every command is a real process; JSON output is checked field by field against what the seeded
rows imply.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import run_cli
from tests.helpers.paths import ROOT
from workerpool.sql import db

APP = """
from workerpool import WorkerPool
pool = WorkerPool()
pool.queue("email")
pool.queue("billing")

@pool.task(queue="email", version=3)
def send(job):
    pass

@pool.task(queue="billing")
def charge(job):
    pass
"""

SEED = """
INSERT INTO workerpool_jobs (queue, task, state, payload_version, run_at, claimed_by,
                             claimed_at, dead_reason, finished_at)
VALUES
  ('email', 'send',     'pending',    1, now() - interval '90 seconds', NULL, NULL, NULL, NULL),
  ('email', 'send',     'pending',    1, now() - interval '10 seconds', NULL, NULL, NULL, NULL),
  ('email', 'send',     'pending',    1, now() + interval '1 hour',     NULL, NULL, NULL, NULL),
  ('email', 'old_task', 'pending',    1, now(),                         NULL, NULL, NULL, NULL),
  ('email', 'old_task', 'pending',    1, now(),                         NULL, NULL, NULL, NULL),
  ('email', 'send',     'pending',    3, now(),                         NULL, NULL, NULL, NULL),
  ('email', 'send',     'processing', 1, now(),      'h:1:a', now(), NULL, NULL),
  ('email', 'send',     'failed',     1, now() + interval '5 minutes',  NULL, NULL, NULL, NULL),
  ('email', 'send',     'done',       1, now(), NULL, NULL, NULL, now()),
  ('email', 'send',     'done',       1, now(), NULL, NULL, NULL, now()),
  ('email', 'send',     'done',       1, now(), NULL, NULL, NULL, now()),
  ('email', 'send',     'dead',   1, now(), NULL, NULL, 'exhausted', now() - interval '40 days'),
  ('email', 'send',     'dead',   1, now(), NULL, NULL, 'exhausted', now() - interval '1 hour'),
  ('email', 'send',     'dead',   1, now(), NULL, NULL, 'permanent', now() - interval '2 hours'),
  ('email', 'send',     'cancelled',  1, now(), NULL, NULL, NULL, now()),
  ('billing', 'charge', 'dead',   1, now(), NULL, NULL, 'abandoned', now() - interval '3 hours');
UPDATE workerpool_jobs SET attempts = 5, max_attempts = 5 WHERE state = 'dead';
INSERT INTO workerpool_workers (id, host, pid, queue, tasks, last_seen) VALUES
  ('h:1:a', 'h', 1, 'email', '{"send": 2}', now() - interval '2 seconds'),
  ('h:2:b', 'h', 2, 'email', '{"send": 3, "old_task": 1}', now() - interval '5 minutes'),
  ('h:3:c', 'h', 3, '@maintenance', '{}', now());
INSERT INTO workerpool_cron (name, queue, expression, timezone, last_tick, next_tick,
                             last_job_id, skipped)
VALUES ('nightly', 'billing', '0 3 * * *', 'Europe/Paris', '2026-01-01T02:00:00Z',
        '2026-01-02T02:00:00Z', 9, 4);
"""


@pytest.fixture
def seeded(db_url, sql, tmp_path: Path):
    sql(SEED)
    (tmp_path / "opsapp.py").write_text(APP)
    return db_url


def ok(out):
    assert out.returncode == 0, out.stderr
    return out.stdout


def dead_ids(sql, **where):
    clause = " AND ".join(f"{k} = %s" for k in where) or "true"
    return [
        i
        for (i,) in sql(
            f"SELECT id FROM workerpool_jobs WHERE state = 'dead' AND {clause} ORDER BY id",
            *where.values(),
        )
    ]


def test_status_json_reports_what_the_rows_imply(seeded, tmp_path):
    status = json.loads(ok(run_cli("status", "--json", url=seeded, cwd=tmp_path)))
    assert status["version"] == 1 and status["source"] == "live workers"
    assert set(status["queues"]) == {"email", "billing"}  # '@maintenance' is not a queue

    email = status["queues"]["email"]
    assert email["counts"] == {
        "pending": 6,
        "processing": 1,
        "failed": 1,
        "done": 3,
        "dead": 3,
        "cancelled": 1,
        "waiting": 0,
    }
    assert email["dead_by_reason"] == {"exhausted": 2, "permanent": 1, "abandoned": 0}
    assert 85 <= email["oldest_pending_age_s"] < 150  # the row due 90 s ago, not the future one
    assert email["unrunnable"] == [  # judged by the live worker only (send v2), not the stale one
        {"task": "old_task", "payload_version": 1, "count": 2, "reason": "unknown task"},
        {
            "task": "send",
            "payload_version": 3,
            "count": 1,
            "reason": "payload version 3 is newer than 2",
        },
    ]
    assert email["live_workers"] == 1

    billing = status["queues"]["billing"]
    assert billing["counts"] == {
        "pending": 0,
        "processing": 0,
        "failed": 0,
        "done": 0,
        "dead": 1,
        "cancelled": 0,
        "waiting": 0,
    }
    assert billing["dead_by_reason"] == {"exhausted": 0, "permanent": 0, "abandoned": 1}
    assert (billing["oldest_pending_age_s"], billing["unrunnable"], billing["live_workers"]) == (
        None,
        None,
        0,
    )  # no live worker: nothing to judge runnability by

    assert status["crons"] == [
        {
            "name": "nightly",
            "queue": "billing",
            "expression": "0 3 * * *",
            "timezone": "Europe/Paris",
            "last_tick": "2026-01-01T02:00:00+00:00",
            "next_tick": "2026-01-02T02:00:00+00:00",
            "last_job_id": 9,
            "last_job_state": "done",
            "skipped": 4,
        }
    ]
    workers = {w["id"]: w for w in status["workers"]}
    assert {i: (w["queue"], w["pid"], w["live"]) for i, w in workers.items()} == {
        "h:1:a": ("email", 1, True),
        "h:2:b": ("email", 2, False),
        "h:3:c": ("@maintenance", 3, True),
    }
    assert 299 <= workers["h:2:b"]["last_seen_age_s"] < 400
    assert workers["h:1:a"]["tasks"] == {"send": 2}


def test_status_with_the_app_judges_rows_by_its_tasks(seeded, tmp_path):
    status = json.loads(
        ok(run_cli("status", "--json", "--app", "opsapp:pool", url=seeded, cwd=tmp_path))
    )
    assert status["source"] == "app"
    assert status["queues"]["email"]["unrunnable"] == [
        {"task": "old_task", "payload_version": 1, "count": 2, "reason": "unknown task"}
    ]
    assert status["queues"]["billing"]["unrunnable"] == []


def test_status_table_for_people(seeded, tmp_path):
    text = ok(run_cli("status", url=seeded, cwd=tmp_path))
    assert re.search(r"^  email\s+6\s+1\s+1\s+3\s+3\s+1\s+0\s+0\s+\d+\.\ds\s+1$", text, re.M), text
    assert re.search(r"^  billing\s+0\s+0\s+0\s+0\s+1\s+0\s+0\s+0\s+-\s+0$", text, re.M), text
    assert re.search(r"^  email\s+2\s+1\s+0$", text, re.M)  # dead by reason
    assert "WAITING ROWS NO LIVE WORKER CAN RUN" in text
    assert re.search(r"^  email\s+old_task\s+1\s+2\s+unknown task$", text, re.M)
    assert re.search(
        r"^  nightly\s+billing\s+0 3 \* \* \*\s+Europe/Paris\s+2026-01-01 02:00:00"
        r"\+00:00\s+2026-01-02 02:00:00\+00:00\s+9 \(done\)\s+4$",
        text,
        re.M,
    ), text
    assert re.search(r"^  email\s+h\s+2\s+.*stale\s+h:2:b$", text, re.M)


def test_status_with_no_database_named_says_so_and_starts_nothing(tmp_path):
    """No URL and no embedded server running: one line, non-zero, no server started (it
    started an empty embedded PostgreSQL here and printed a missing-table traceback)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKERPOOL_")}
    env.update(PYTHONPATH=str(ROOT), WORKERPOOL_EMBEDDED_DIR=str(tmp_path / "pgdata"))
    try:
        done = subprocess.run(
            [sys.executable, "-m", "workerpool", "status"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:  # were one started after all, it must not outlive the test
        db.stop_embedded(tmp_path / "pgdata")
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "workerpool status: no database to read: set $WORKERPOOL_DATABASE_URL (or give --app"
        f" whose pool names one); the embedded PostgreSQL of {tmp_path / 'pgdata'} is not"
        " running, and status does not start one"
    ]
    assert not (tmp_path / "pgdata").exists()


def test_dead_list_json_and_table(seeded, sql, tmp_path):
    listing = json.loads(
        ok(
            run_cli(
                "dead",
                "list",
                "--queue",
                "email",
                "--reason",
                "exhausted",
                "--json",
                url=seeded,
                cwd=tmp_path,
            )
        )
    )
    assert listing["total"] == 2
    assert sorted(j["id"] for j in listing["jobs"]) == dead_ids(sql, dead_reason="exhausted")
    assert {(j["queue"], j["task"], j["reason"], j["attempts"]) for j in listing["jobs"]} == {
        ("email", "send", "exhausted", 5)
    }
    text = ok(run_cli("dead", "list", "--since", "150m", url=seeded, cwd=tmp_path))
    assert text.splitlines()[-1] == "2 of 2 matching dead jobs shown"  # 1 h and 2 h ago


def test_dead_retry_dry_run_then_real_then_refused(seeded, sql, tmp_path):
    email_dead = dead_ids(sql, queue="email")
    before = sql("SELECT * FROM workerpool_jobs ORDER BY id")
    dry = ok(
        run_cli("dead", "retry", "--all", "--queue", "email", "--dry-run", url=seeded, cwd=tmp_path)
    )
    assert dry.splitlines() == [
        "dry run: would replay 3 dead jobs (send: 3)",
        "ids: " + " ".join(map(str, email_dead)),
    ]
    assert sql("SELECT * FROM workerpool_jobs ORDER BY id") == before

    refused = run_cli("dead", "retry", "--all", url=seeded, cwd=tmp_path)  # charge: no live worker
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1
    assert "task 'charge' (1 jobs) is no longer registered; nothing was changed" in refused.stderr
    assert sql("SELECT * FROM workerpool_jobs ORDER BY id") == before

    result = json.loads(
        ok(run_cli("dead", "retry", str(email_dead[0]), "--json", url=seeded, cwd=tmp_path))
    )
    assert (result["count"], result["ids"], result["dry_run"]) == (1, [email_dead[0]], False)
    state, attempts, replays = sql(
        "SELECT state, attempts, replays FROM workerpool_jobs WHERE id = %s", email_dead[0]
    )[0]
    assert (state, attempts, replays[0]["attempts"], replays[0]["dead_reason"]) == (
        "pending",
        0,
        5,
        "exhausted",
    )

    neither = run_cli("dead", "retry", url=seeded, cwd=tmp_path)
    assert neither.returncode == 1 and "give job IDS or --all" in neither.stderr


def test_dead_purge_older_than(seeded, sql, tmp_path):
    dry = json.loads(
        ok(
            run_cli(
                "dead",
                "purge",
                "--older-than",
                "30d",
                "--dry-run",
                "--json",
                url=seeded,
                cwd=tmp_path,
            )
        )
    )
    assert dry == {"dry_run": True, "count": 1}
    assert ok(run_cli("dead", "purge", "--older-than", "90m", url=seeded, cwd=tmp_path)) == (
        "purged 3 dead jobs older than 90m\n"
    )  # 40 days, 2 h and 3 h old; the 1 h one stays
    assert sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'dead'") == [(1,)]
    bad = run_cli("dead", "purge", "--older-than", "a while", url=seeded, cwd=tmp_path)
    assert bad.returncode == 1 and "bad duration 'a while'" in bad.stderr


def test_bulk_replay_shows_progress(db_url, sql, tmp_path):
    sql(
        "INSERT INTO workerpool_jobs (queue, task, state, dead_reason, attempts, finished_at)"
        " SELECT 'email', 'send', 'dead', 'exhausted', 5, now() FROM generate_series(1, 2500)"
    )
    (tmp_path / "opsapp.py").write_text(APP)
    out = run_cli(
        "dead",
        "retry",
        "--all",
        "--app",
        "opsapp:pool",
        url=db_url,
        cwd=tmp_path,
        extra_env={"WORKERPOOL_PROGRESS": "1"},
    )
    assert ok(out).splitlines()[0] == "replayed 2500 dead jobs (send: 2500)"
    progress = [line for line in out.stderr.splitlines() if line.startswith("replaying [")]
    assert [re.search(r"\] (\d+/\d+) ", line)[1] for line in progress] == [
        "1000/2500",
        "2000/2500",
        "2500/2500",
    ]
