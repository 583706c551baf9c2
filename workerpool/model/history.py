"""Which history partitions to create and which to drop (docs/storage.md): a pure plan.

Partitions cover whole days of ``finished_at`` in UTC, ``width`` days each, aligned on the Unix
epoch. The plan keeps one contiguous run of partitions from the one holding ``now - retention``
to ``ahead`` widths past ``now``: a partition whose last instant is past the retention is
dropped whole; the missing ones after the newest are created. A run started after a width
change begins where the newest old partition ends, so the run has no gap either way.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import NamedTuple

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: Partition tables are named this prefix plus their first day (``..._p20261202``).
PARTITION_PREFIX = "workerpool_jobs_history_p"


class Partition(NamedTuple):
    name: str
    lower: datetime  # inclusive
    upper: datetime  # exclusive


class Plan(NamedTuple):
    create: list[Partition]
    drop: list[Partition]
    #: The first instant a moved row may have: rows finished before it stay in the jobs table
    #: (the pruning deletes them) instead of finding no partition.
    floor: datetime


def slot_start(moment: datetime, width: int) -> datetime:
    """The start of the grid slot holding ``moment``."""
    days = (moment - EPOCH) // timedelta(days=1)
    return EPOCH + timedelta(days=days - days % width)


def partition(lower: datetime, upper: datetime) -> Partition:
    return Partition(f"{PARTITION_PREFIX}{lower.astimezone(UTC):%Y%m%d}", lower, upper)


def plan(
    existing: list[Partition], now: datetime, *, retention: float, width: int, ahead: int
) -> Plan:
    """What to create and drop so that the partitions cover ``[now - retention, now + ahead
    widths)`` and nothing older (``existing``: the partitions there are, any order)."""
    oldest_kept = now - timedelta(seconds=retention)
    drop = [p for p in existing if p.upper <= oldest_kept]
    kept = sorted((p for p in existing if p.upper > oldest_kept), key=lambda p: p.lower)
    start = slot_start(oldest_kept, width)
    if kept and kept[-1].upper > start:
        start = kept[-1].upper
    until = now + timedelta(days=width * ahead)
    create = []
    while start < until:
        end = slot_start(start, width) + timedelta(days=width)
        create.append(partition(start, end))
        start = end
    run = kept + create
    floor = run[-1].lower if run else until
    for earlier, later in zip(reversed(run[:-1]), reversed(run[1:]), strict=True):
        if earlier.upper != later.lower:
            break
        floor = earlier.lower
    return Plan(create, drop, floor)
