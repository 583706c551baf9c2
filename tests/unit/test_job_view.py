"""The view a handler receives of a claimed row (``Job.from_row``), built without the frozen
dataclass's ``__init__``: it must still be the same object that ``__init__`` would build."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from workerpool.model.job import Job

RUN_AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _row(**changes):
    row = dict(
        id=7,
        queue="q",
        task="t",
        payload={"n": 1},
        payload_version=2,
        attempts=3,
        max_attempts=5,
        key="k",
        priority=4,
        run_at=RUN_AT,
        checkpoint={"at": 9},
        batch_id=11,
        steps={"charge": {"value": 1}},
    )
    return SimpleNamespace(**{**row, **changes})


def test_from_row_sets_every_field_as_the_constructor_would():
    job = Job.from_row(_row(), worker="w")
    assert set(job.__dict__) == {field.name for field in dataclasses.fields(Job)}
    assert job == Job(
        id=7,
        queue="q",
        task="t",
        payload={"n": 1},
        payload_version=2,
        attempt=3,
        max_attempts=5,
        key="k",
        priority=4,
        run_at=RUN_AT,
        checkpoint_data={"at": 9},
        worker="w",
        batch_id=11,
    )
    assert job.steps_data == {"charge": {"value": 1}}


def test_from_row_stays_frozen_and_takes_the_upcast_payload():
    job = Job.from_row(_row(steps=None), payload={"n": 2})
    assert job.payload == {"n": 2} and job.steps_data == {}
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.id = 8  # type: ignore[misc]
