"""`workerpool healthcheck`: exit 0 iff every heartbeat file is fresh. An exec probe.

Standard library only, touches no database and imports nothing heavy: a Kubernetes exec probe
pays for a Python start-up and a few ``stat`` calls, nothing else.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from . import heartbeat


@dataclass(frozen=True)
class Verdict:
    healthy: bool
    message: str


def _expanded(asked: list[str], present: list[str]) -> list[str]:
    """The files to judge for the names asked: a queue with several children (``render.0``,
    ``render.1``, ...) is asked for by its name, and then every one of them is judged."""
    names: list[str] = []
    for name in asked:
        children = [p for p in present if p.startswith(f"{name}.") and p[len(name) + 1:].isdigit()]
        names += children if children and name not in present else [name]
    return list(dict.fromkeys(names))


def check(directory: Path, max_age: float, workers: list[str] | None = None,
          now: float | None = None) -> Verdict:
    """Judge the heartbeat files of ``workers`` (default: every file in ``directory``)."""
    now = time.time() if now is None else now
    present = heartbeat.list_workers(directory)
    names = _expanded(workers, present) if workers else present
    if not names:
        return Verdict(False, f"no heartbeat files in {directory}")
    ages: dict[str, float] = {}
    for name in names:
        try:
            ages[name] = heartbeat.age(heartbeat.path_for(directory, name), now)
        except FileNotFoundError:
            return Verdict(False, f"{name}: no heartbeat file in {directory}")
        except OSError as exc:
            return Verdict(False, f"{name}: cannot read its heartbeat file ({exc.strerror})")
    stalest = max(ages, key=ages.__getitem__)
    if ages[stalest] > max_age:
        return Verdict(False, f"{stalest}: heartbeat is {ages[stalest]:.1f}s old "
                              f"(max {max_age:g}s)")
    summary = ", ".join(f"{name} {value:.1f}s" for name, value in sorted(ages.items()))
    return Verdict(True, f"ok: {summary}")
