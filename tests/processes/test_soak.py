"""The short soak: ``python -m bench --soak`` against a real ``workerpool run`` for 30 seconds.

A liveness bound, not a timing claim: at an offered rate well under what this machine drains,
the backlog must not grow over the last 20 seconds, and the worker must have done real work.
The figures themselves are printed for the record.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys

from sqlalchemy.engine import URL

from tests.helpers.paths import ROOT

#: Jobs offered per second: an eighth of what one worker child drained here with other sessions
#: running on the same two cores (about 1,700/s at concurrency 20), so a slow CI machine still
#: has room.
RATE = 200
MINUTES = 0.5
INTERVAL = 5.0
LAST = 20.0  # the backlog may not grow over this last stretch (after 10 s of warm-up)
#: Growth allowed over LAST, in seconds of offered work: one sample's worth of jitter.
SLACK_SECONDS = INTERVAL
RUN_BOUND = MINUTES * 60 + 120  # the whole run, start-up and teardown included


def test_backlog_does_not_grow_under_a_steady_load(server_url: URL, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKERPOOL_", "BENCH_"))}
    env["PYTHONPATH"] = str(ROOT)
    admin = server_url.set(drivername="postgresql").render_as_string(hide_password=False)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--url",
            admin,
            "--soak",
            str(MINUTES),
            "--rate",
            str(RATE),
            "--interval",
            str(INTERVAL),
            "--out",
            str(tmp_path),
            "--label",
            "ci",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_BOUND,
    )
    print(result.stdout)
    assert result.returncode == 0, result.stderr[-3000:]
    with (tmp_path / "ci.csv").open() as rows:
        samples = [
            {k: float(v) if v else None for k, v in row.items()} for row in csv.DictReader(rows)
        ]
    assert len(samples) >= MINUTES * 60 / INTERVAL - 2, samples
    end = samples[-1]
    before = min(samples, key=lambda s: abs(s["t"] - (end["t"] - LAST)))
    growth = end["backlog"] - before["backlog"]
    assert growth <= RATE * SLACK_SECONDS, (
        f"backlog grew by {growth:.0f} jobs over the last {end['t'] - before['t']:.0f} s"
        f" at {RATE}/s offered:\n{result.stdout}"
    )
    assert end["done"] > RATE * LAST  # it really ran
