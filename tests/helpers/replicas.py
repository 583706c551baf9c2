"""Several `workerpool run` replicas of one application, each in its own process group."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy.engine import URL

from tests.helpers.paths import ROOT
from tests.helpers.processes import Supervisor, kill_all
from tests.helpers.waiting import wait_until


class Replicas:
    """Starts supervisors of ``app`` on ``db_url``; ``stop()`` SIGKILLs every one of them."""

    def __init__(
        self, app: str, db_url: URL, tmp_path: Path, extra_env: dict[str, str] | None = None
    ) -> None:
        self.app, self.tmp_path = app, tmp_path
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("WORKERPOOL_", "WORKER_", "TEST_"))
        }
        self.env.update(
            WORKERPOOL_DATABASE_URL=db_url.render_as_string(hide_password=False),
            WORKER_CLAIM_STALE_MS="3600000",
            PYTHONPATH=str(ROOT),
            **(extra_env or {}),
        )
        self.running: list[Supervisor] = []

    def start(self, *args: str) -> Supervisor:
        n = len(self.running)
        heartbeats = self.tmp_path / f"heartbeats{n}"
        heartbeats.mkdir(mode=0o700)
        log_path = self.tmp_path / f"replica{n}.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "workerpool",
                    "run",
                    self.app,
                    "--heartbeat-dir",
                    str(heartbeats),
                    *args,
                ],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                cwd=ROOT,
            )
        self.running.append(Supervisor(proc, log_path, heartbeats, self.env))
        return self.running[-1]

    def stop(self) -> None:
        kill_all(self.running, show_logs=True)
        self.running.clear()


LIMITS_APP = "tests.apps.limits:pool"


def start_registered(replicas: Replicas, sql, queue: str, count: int) -> None:
    """Start ``count`` supervisors of ``queue`` and wait until each child has registered."""
    for _ in range(count):
        replicas.start("--queue", queue)
    wait_until(
        lambda: (
            sql("SELECT count(*) FROM workerpool_workers WHERE queue = %s", queue)[0][0] == count
        ),
        timeout=30,
        message=f"{count} {queue} workers registered",
    )


@contextmanager
def processing_samples(sql) -> Iterator[list[int]]:
    """Count the ``processing`` rows as fast as one connection can ask, while the block runs."""
    samples: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append(
                sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'processing'")[0][0]
            )

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        yield samples
    finally:
        done.set()
        sampler.join()


def max_overlap(intervals: list[tuple]) -> int:
    """The most intervals open at one instant (an end at t closes before a start at t)."""
    edges = sorted(
        [(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals],
        key=lambda edge: (edge[0], edge[1]),
    )
    most = open_now = 0
    for _, step in edges:
        open_now += step
        most = max(most, open_now)
    return most
