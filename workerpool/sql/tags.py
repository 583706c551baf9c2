"""Tag filters: ``tags @> ARRAY[...]`` (a job carries every tag asked for), and the counts of
``workerpool status --tag``.

Index: ix_workerpool_jobs_tags (GIN, partial on ``tags IS NOT NULL``: the planner proves that
from the strict ``@>``). The tags are one array parameter, so one statement text serves every
filter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, func, select

from .schema import jobs

#: Rows a tag's counts read at most (past it the counts are a lower bound).
TAG_COUNT_CAP = 100_000


def carries(tags: Sequence[str]) -> Any:
    """Jobs carrying every one of ``tags``."""
    return jobs.c.tags.op("@>")(bindparam("filter_tags", list(tags), type_=jobs.c.tags.type))


# tag_counts: jobs carrying the tags, by queue and state, reading at most ``cap`` rows.
# Index: ix_workerpool_jobs_tags (a bitmap scan of the matching rows).
def tag_counts(
    conn: Connection, tags: Sequence[str], cap: int = TAG_COUNT_CAP
) -> tuple[list[Any], bool]:
    """``(queue, state, count)`` rows of the jobs carrying ``tags``, and whether the cap cut
    them short (the counts are then a lower bound)."""
    matching = select(jobs.c.queue, jobs.c.state).where(carries(tags)).limit(cap + 1).subquery()
    rows = list(
        conn.execute(
            select(matching.c.queue, matching.c.state, func.count().label("count"))
            .group_by(matching.c.queue, matching.c.state)
            .order_by(matching.c.queue, matching.c.state)
        )
    )
    return rows, sum(row.count for row in rows) > cap
