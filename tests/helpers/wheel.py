"""Building workerpool's wheel from the source tree and installing it into a fresh venv."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers.paths import ROOT

#: Skipped when copying the tree to build from: caches and earlier build output.
IGNORED = shutil.ignore_patterns(".*", "__pycache__", "*.egg-info", "build", "dist")


def build_wheel(tmp: Path) -> Path:
    source = tmp / "source"
    shutil.copytree(ROOT, source, ignore=IGNORED)  # the build writes build/ into its source
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", tmp / "dist", source],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # every importable package is declared: setuptools warns of one it would ship undeclared
    assert "absent from the `packages` configuration" not in built.stdout + built.stderr, [
        line for line in built.stdout.splitlines() if "absent from" in line
    ]
    (wheel,) = (tmp / "dist").glob("workerpool-*.whl")
    return wheel


def fresh_venv(tmp: Path, requirement: str) -> Path:
    """A venv with ``requirement`` (the wheel's path, with extras if any) and its dependencies."""
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=60)
    pip_install(venv, requirement)
    return venv


def pip_install(venv: Path, requirement: str) -> None:
    """Install ``requirement`` into ``venv``: this venv's pip installs into the new one
    (--python), so no ensurepip and the same index settings."""
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "install", "-q", requirement],
        check=True,
        capture_output=True,
        timeout=180,
    )


def user_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: no workerpool settings, no checkout on PYTHONPATH."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("WORKERPOOL_", "WORKER_", "PYTHON"))
    }
    env.update(extra)
    return env
