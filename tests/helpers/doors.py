"""The doors in, driven as another system would: ``psql`` in a subprocess."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class PsqlRun:
    code: int
    out: str
    err: str


def psql(dsn: str, statement: str) -> PsqlRun:
    """``statement`` through the ``psql`` client (unaligned, tuples only, stop on error)."""
    if shutil.which("psql") is None:
        pytest.skip("the psql client is not installed")
    done = subprocess.run(
        ["psql", "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-c", statement],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return PsqlRun(done.returncode, done.stdout.strip(), done.stderr.strip())


def error_line(run: PsqlRun) -> str:
    """psql's ERROR line (the server's one readable line), without the CONTEXT after it."""
    lines = [line for line in run.err.splitlines() if line.startswith("ERROR:")]
    assert lines, f"no ERROR line in {run.err!r}"
    return lines[0].removeprefix("ERROR:").strip()
