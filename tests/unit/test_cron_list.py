"""`workerpool cron list` shows each next tick in its schedule's own timezone, beside it."""

from __future__ import annotations

from datetime import UTC, datetime

from workerpool.cli.crons import render_list
from workerpool.ops.crons import CronView
from workerpool.ops.status import table


def view(name: str, timezone: str, next_tick: datetime | None) -> CronView:
    return CronView(
        name,
        "0 3 * * *",
        "ops",
        timezone,
        None,
        next_tick,
        None,
        None,
        None,
        0,
        False,
        None,
        None,
        None,
        None,
    )


def test_the_next_tick_is_shown_in_the_schedules_timezone():
    tick = datetime(2026, 12, 7, 2, 0, tzinfo=UTC)  # 03:00 in Paris in winter
    text = render_list(
        [
            view("nightly", "Europe/Paris", tick),
            view("utc", "UTC", tick),
            view("new", "America/New_York", None),
        ],
        table,
    )
    header, *rows = text.splitlines()
    assert header.split() == [
        "NAME",
        "EXPRESSION",
        "QUEUE",
        "TIMEZONE",
        "NEXT",
        "TICK",
        "LAST",
        "JOB",
        "PAUSED",
    ]
    assert "Europe/Paris" in rows[0] and "2026-12-07T03:00:00+01:00" in rows[0]
    assert "2026-12-07T02:00:00+00:00" in rows[1]
    assert "America/New_York" in rows[2]
