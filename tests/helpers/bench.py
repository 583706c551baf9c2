"""`python -m bench` as a test runs it: a subprocess on a server, its JSON figures, and the
private databases it must leave behind none of."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg
from sqlalchemy.engine import URL

from tests.helpers.db import libpq
from tests.helpers.paths import ROOT


def run_bench(url: URL, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("WORKERPOOL_DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "bench", "--url", libpq(url), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def bench_databases(url: URL) -> set[str]:
    with psycopg.connect(libpq(url), autocommit=True) as conn:
        rows = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'wp_bench_%'")
        return {name for (name,) in rows}


def figures(result: subprocess.CompletedProcess) -> dict[str, dict]:
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    parsed = [json.loads(line) for line in lines]
    return {figure["name"]: figure for figure in parsed}
