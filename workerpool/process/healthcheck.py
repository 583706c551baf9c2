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
        children = [p for p in present if p.startswith(f"{name}.") and p[len(name) + 1 :].isdigit()]
        names += children if children and name not in present else [name]
    return list(dict.fromkeys(names))


def find(bases: list[Path], app: str | None = None) -> list[Path] | Verdict:
    """The directories to judge when none is given: those live supervisors hold under
    ``bases`` (of ``app`` only, when named). Several of different apps, with no app named, are
    a Verdict: judging them together would let one app's child answer for another's."""
    owners = [
        o for base in bases for o in heartbeat.live_owners(base) if app is None or o.app == app
    ]
    if not owners:
        whose = f" of {app}" if app else ""
        where = " or ".join(str(base) for base in bases)
        return Verdict(False, f"no live supervisor{whose} has a heartbeat directory in {where}")
    apps = {o.app for o in owners}
    if app is None and len(apps) > 1:
        listed = "; ".join(o.describe() for o in owners)
        return Verdict(
            False,
            f"{len(owners)} supervisors run here ({listed}): name one with --app APP:POOL or --dir",
        )
    return [o.directory for o in owners]


def check_all(directories: list[Path], max_age: float, workers: list[str] | None = None) -> Verdict:
    """Every directory judged by :func:`check`: the first unhealthy verdict, else all ok."""
    verdicts = [check(d, max_age, workers) for d in directories]
    failed = next((v for v in verdicts if not v.healthy), None)
    if failed is not None or len(verdicts) == 1:
        return failed or verdicts[0]
    return Verdict(True, "; ".join(f"{d}: {v.message}" for d, v in zip(directories, verdicts)))


def check(
    directory: Path, max_age: float, workers: list[str] | None = None, now: float | None = None
) -> Verdict:
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
        return Verdict(
            False, f"{stalest}: heartbeat is {ages[stalest]:.1f}s old (max {max_age:g}s)"
        )
    summary = ", ".join(f"{name} {value:.1f}s" for name, value in sorted(ages.items()))
    return Verdict(True, f"ok: {summary}")
