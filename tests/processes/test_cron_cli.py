"""`workerpool cron` as an operator runs it, against real `workerpool run` replicas: a pause set
from the command line stops every replica's one-second cron, stays after every replica is
killed and restarted, and ends with `resume`; each change is in `workerpool audit` under the
name given with `--as`. Bad input exits non-zero with one line and writes nothing."""

from __future__ import annotations

import json

import pytest

from tests.helpers.cli import run_cli
from tests.helpers.paths import ROOT
from tests.helpers.replicas import Replicas
from tests.helpers.waiting import wait_until

APP = "tests.apps.cron_runtime:pool"


@pytest.fixture
def replicas(db_url, tmp_path):
    """Start a group of replicas (each group in its own folder); all are killed afterwards."""
    groups: list[Replicas] = []

    def group() -> Replicas:
        folder = tmp_path / f"group{len(groups)}"
        folder.mkdir()
        groups.append(Replicas(APP, db_url, folder))
        return groups[-1]

    yield group
    for started in groups:
        started.stop()


def cli(db_url, *args):
    return run_cli(*args, url=db_url, cwd=ROOT)


def beat_jobs_since(sql, moment):
    return sql(
        "SELECT count(*) FROM workerpool_jobs WHERE task = 'beat' AND created_at > %s", moment
    )[0][0]


def handled_ticks_after(sql, moment, count):
    """Wait until the schedulers moved beat's last tick ``count`` seconds past ``moment``."""
    wait_until(
        lambda: sql(
            "SELECT last_tick > %s + make_interval(secs => %s) FROM"
            " workerpool_cron WHERE name = 'beat'",
            moment,
            count,
        )[0][0],
        timeout=30,
        message=f"ticks handled {count} s after {moment}",
    )


def test_a_pause_from_the_cli_holds_on_every_replica_and_across_a_restart(replicas, db_url, sql):
    first = replicas()
    first.start()
    first.start()
    wait_until(
        lambda: (
            sql("SELECT count(*) FROM workerpool_jobs WHERE task = 'beat' AND state = 'done'")[0][0]
            >= 2
        ),
        timeout=40,
        message="the replicas running beat",
    )

    paused = cli(db_url, "cron", "pause", "beat", "--as", "alice")
    assert paused.returncode == 0, paused.stderr
    [(paused_at,)] = sql("SELECT paused_at FROM workerpool_cron WHERE name = 'beat'")
    handled_ticks_after(sql, paused_at, 3)
    # a pass that held the row when the pause came may still enqueue its tick: within a second
    grace = "1 second"
    assert (
        sql(
            f"SELECT count(*) FROM workerpool_jobs WHERE task = 'beat'"
            f" AND created_at > %s::timestamptz + interval '{grace}'",
            paused_at,
        )[0][0]
        == 0
    )

    first.stop()
    [(restarted_at,)] = sql("SELECT now()")
    replicas().start()
    wait_until(
        lambda: (
            sql(
                "SELECT count(*) FROM workerpool_workers WHERE queue = '@maintenance'"
                " AND started_at > %s",
                restarted_at,
            )[0][0]
            >= 1
        ),
        timeout=30,
        message="a new scheduler registered",
    )
    handled_ticks_after(sql, restarted_at, 3)
    assert beat_jobs_since(sql, restarted_at) == 0

    listing = cli(db_url, "cron", "list", "--json")
    assert listing.returncode == 0, listing.stderr
    beat = next(c for c in json.loads(listing.stdout) if c["name"] == "beat")
    assert (beat["paused"], beat["paused_by"]) == (True, "alice")
    text = cli(db_url, "cron", "list").stdout
    assert "beat" in text and "yes, by alice at" in text

    resumed = cli(db_url, "cron", "resume", "beat", "--as", "bob")
    assert resumed.returncode == 0, resumed.stderr
    [(resumed_at,)] = sql("SELECT changed_at FROM workerpool_cron WHERE name = 'beat'")
    wait_until(
        lambda: beat_jobs_since(sql, resumed_at) >= 1, timeout=30, message="a job after the resume"
    )

    trail = json.loads(cli(db_url, "audit", "--json").stdout)["entries"]
    assert [(e["actor"], e["source"], e["action"], e["target"]) for e in trail] == [
        ("bob", "cli", "cron_resume", "cron:beat"),
        ("alice", "cli", "cron_pause", "cron:beat"),
    ]


def test_cron_run_from_the_cli_is_one_job_per_request(db_url, sql):
    first = cli(db_url, "cron", "run", "nightly", "--app", APP, "--request", "r1", "--json")
    again = cli(db_url, "cron", "run", "nightly", "--app", APP, "--request", "r1", "--json")
    assert first.returncode == 0 and again.returncode == 0, first.stderr + again.stderr
    assert json.loads(first.stdout) == json.loads(again.stdout)
    assert sql("SELECT count(*) FROM workerpool_jobs")[0][0] == 1
    assert "cron_run" in cli(db_url, "audit").stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("cron", "pause", "nope", "--app", APP), "unknown cron 'nope'"),
        (("cron", "resume", "nope"), "unknown cron 'nope'"),
        (("cron", "run", "nightly"), "cron run needs --app APP:POOL"),
        (("cron", "run", "nope", "--app", APP), "unknown cron 'nope'"),
        (("cron", "run", "nightly", "--app", APP, "--request", "a b"), "request must be"),
        (("cron", "pause", "nightly", "--app", APP, "--as", ""), "actor must be"),
        (("pause", "cron", "--app", APP, "--as", "tab\there"), "actor must be"),
        (("audit", "--action", "drop"), "action must be one of"),
        (("audit", "--limit", "0"), "limit must be an int within"),
    ],
)
def test_bad_input_exits_non_zero_with_one_line_and_writes_nothing(db_url, sql, args, message):
    result = cli(db_url, *args)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    for table in ("workerpool_cron", "workerpool_jobs", "workerpool_audit", "workerpool_queues"):
        assert sql(f"SELECT count(*) FROM {table}")[0][0] == 0, table
