"""Planner settings for workerpool's own statements: plans that do not depend on statistics.

Every hot statement (each claim arm, the lease fences, the crash release, the sweep, the prune)
walks a partial index in its ORDER BY order and stops at its LIMIT. That plan is right whatever
the table holds, but the planner only picks it while the table's statistics are fresh. On a
table analyzed while empty (just migrated, or with autovacuum behind) whose row count a VACUUM
then refreshed, it estimates a few rows per arm, so ``LIMIT`` earns no fast-start discount and
"bitmap-scan every due row, then sort them" costs the same as the ordered index scan (40.16
against 40.89 at 350k pending rows): a coin toss, lost, and every claim then reads and sorts
the whole backlog (about 0.5 s at 350k rows, with the sort spilling to disk).

With sorts and bitmap scans priced out, the ordered index scan is the only cheap path left for
each of these statements. Nothing is forbidden: a disabled path only gets ``disable_cost``
added, so a statement whose index were missing would still run, slowly. They are set

- in the worker's connection startup options (libpq ``options``: no round trip, and in force
  before the first planning on the connection: PostgreSQL keeps a cached plan across a later
  ``SET``, and the worker's statements are prepared), and
- locally in every bounded transaction (``clock.bound_transaction``): behind PgBouncer, in the
  maintenance child and in the releaser, where sessions are not workerpool's own.

Never on an application's connections: ``pool.engine`` serves users too, and only our
transactions set them there, ``SET LOCAL``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import any_, func, literal_column, select

from ..model.states import JobState
from .schema import jobs

#: The settings, as PostgreSQL names and values. ``jit``: a plan that still holds a disabled
#: node (a sort where no index serves) carries ``disable_cost`` (1e10), far past
#: ``jit_above_cost``, and PostgreSQL would then JIT-compile it on every execution (1.4 s per
#: claim, measured on a per-key claim that used a window function).
PLANNER_SETTINGS: dict[str, str] = {"enable_sort": "off", "enable_bitmapscan": "off", "jit": "off"}


def state_in(*states: JobState, table: Any = jobs) -> Any:
    """``state IN (...)`` with the states as literals, never parameters.

    The partial indexes are defined on these literals: with parameters, a generic plan (what a
    prepared statement caches) cannot prove the index applies, and sorting is then its only way
    to the ORDER BY.
    """
    assert set(states) <= set(JobState), states  # constants of this package, never input
    values = [literal_column(f"'{state}'") for state in states]
    column = table.c.state
    return column == values[0] if len(values) == 1 else column.in_(values)


def one_of(picked: Any, table: Any = jobs) -> Any:
    """``table.id = ANY(ARRAY(SELECT id FROM picked))``: the claim's UPDATE finds its rows by
    primary key, with no join for the planner to choose.

    As a join (``WHERE id = picked.id``), a generic plan (the limited claim keeps one, see
    ``limits_claim``) prices the arms' ``LIMIT $n`` at a tenth of the backlog, and on a table
    that is mostly backlog a hash join over a scan of the whole table then looks cheaper than
    the index probes: 53 ms per claim of 10 at 120k pending rows instead of 0.3. An array is a
    value: the update probes the primary key with it, whatever the estimates.
    """
    return table.c.id == any_(func.array(select(picked.c.id).scalar_subquery()))
