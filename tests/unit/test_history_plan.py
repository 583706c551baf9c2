"""Which history partitions the maintenance child creates and drops (a pure plan)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from workerpool.model.history import PARTITION_PREFIX, partition, plan

NOW = datetime(2026, 12, 2, 4, 40, tzinfo=UTC)
DAY = timedelta(days=1)
WEEK = 7 * 86400.0


def days(parts) -> list[str]:
    return [p.name.removeprefix(PARTITION_PREFIX) for p in parts]


def test_a_first_run_covers_the_retention_to_the_days_ahead_one_day_each():
    first = plan([], NOW, retention=WEEK, width=1, ahead=3)
    assert days(first.create) == [f"202611{d}" for d in range(25, 31)] + [
        "20261201",
        "20261202",
        "20261203",
        "20261204",
        "20261205",
    ]
    assert all(p.upper - p.lower == DAY for p in first.create)
    assert first.drop == [] and first.floor == datetime(2026, 11, 25, tzinfo=UTC)


def test_later_runs_drop_whole_partitions_past_the_retention_and_add_the_next_days():
    first = plan([], NOW, retention=WEEK, width=1, ahead=3).create
    later = plan(first, NOW + 2 * DAY, retention=WEEK, width=1, ahead=3)
    assert days(later.drop) == ["20261125", "20261126"]
    assert days(later.create) == ["20261206", "20261207"]
    assert later.floor == datetime(2026, 11, 27, tzinfo=UTC)
    assert plan(first, NOW, retention=WEEK, width=1, ahead=3) == ([], [], first[0].lower)


def test_a_new_width_starts_where_the_newest_partition_ends_leaving_no_gap():
    first = plan([], NOW, retention=WEEK, width=1, ahead=3).create
    wider = plan(first, NOW, retention=WEEK, width=7, ahead=3)
    assert wider.create[0].lower == first[-1].upper  # clipped to the grid's next boundary
    assert all(p.upper.weekday() == wider.create[1].lower.weekday() for p in wider.create)
    assert wider.floor == first[0].lower


def test_the_floor_is_the_start_of_the_run_that_reaches_today():
    def on(day: int) -> datetime:
        return datetime(2026, 11, day, tzinfo=UTC)

    joined = plan([partition(on(1), on(2))], NOW, retention=90 * 86400.0, width=1, ahead=1)
    assert joined.drop == [] and joined.floor == on(1)  # rows before it have no partition
    gap = [partition(on(1), on(2)), partition(on(3), on(4))]  # one dropped by hand
    assert plan(gap, NOW, retention=90 * 86400.0, width=1, ahead=1).floor == on(3)
