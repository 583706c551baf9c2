"""The chaos checker counts the ``once`` jobs' keyless effects (written with ``complete_in``):
exactly one for a done job, none for a job that ended otherwise; a doubled or a missing one is
found (a checker that passed everything would fail here)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from workerpool.chaos.checker import History, check

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def history(state: str, effects: int) -> History:
    key = "chaos:1:1"
    row = {
        "id": 1,
        "key": key,
        "task": "once",
        "state": state,
        "dead_reason": "exhausted" if state == "dead" else None,
        "attempts": 1,
        "max_attempts": 5,
        "errors": [],
        "payload": {},
        "result": {"once": key} if state == "done" else None,
        "batch_id": None,
        "finished_at": T0,
    }
    run = {
        "exec_id": "a",
        "job_id": 1,
        "kind": "once",
        "attempt": 1,
        "outcome": "ok",
        "tick": None,
        "worker": "w",
        "started_at": T0,
        "finished_at": T0,
    }
    return History(
        enqueued=[{"key": key, "task": "once", "mode": "single", "status": "ok", "job_id": 1}],
        jobs={1: row},
        execs=[run],
        probes={"a": [(T0, True)]},
        effects={key: {"key": key}},
        once={1: effects} if effects else {},
    )


def test_a_done_once_job_with_its_one_effect_passes():
    verdict = check(history("done", 1))
    assert verdict.ok, dict(verdict.violations)
    assert verdict.notes["once effects counted"] == 1


@pytest.mark.parametrize(
    ("state", "effects", "violation"),
    [
        ("done", 2, "once_doubled"),
        ("done", 0, "once_missing"),
        ("dead", 1, "once_without_done"),
    ],
)
def test_a_doubled_missing_or_stray_effect_is_found(state, effects, violation):
    assert violation in check(history(state, effects)).violations
