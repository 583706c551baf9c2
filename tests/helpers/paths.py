"""Where the repository is, for subprocesses that need it on ``PYTHONPATH`` or as their cwd."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
