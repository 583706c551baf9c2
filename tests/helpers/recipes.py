"""Starting `workerpool run` on one of the examples/ recipes, for the recipe tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.helpers.paths import ROOT
from tests.helpers.processes import Supervisor, kill_all


def recipe_env(url: str, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("WORKERPOOL_", "WORKER_", "TEST_", "DJANGO_"))
    }
    env.update(WORKERPOOL_DATABASE_URL=url, PYTHONPATH=str(ROOT), **extra)
    return env


@contextmanager
def workerpool_run(target: str, url: str, tmp_path: Path, **extra_env: str) -> Iterator[Supervisor]:
    """`workerpool run TARGET` on ``url`` for the block; its process group killed afterwards."""
    heartbeats = tmp_path / "heartbeats"
    heartbeats.mkdir(mode=0o700, exist_ok=True)
    env = recipe_env(url, **extra_env)
    log_path = tmp_path / "workerpool-run.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "workerpool", "run", target, "--heartbeat-dir", str(heartbeats)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            cwd=ROOT,
        )
    sup = Supervisor(proc, log_path, heartbeats, env)
    try:
        yield sup
    finally:
        kill_all([sup])
