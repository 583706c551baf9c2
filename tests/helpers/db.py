"""Reading the test database: libpq strings for raw psycopg connections, job rows, counts.

``sql`` below is the conftest fixture: run one statement, get its rows.
"""

from __future__ import annotations

from sqlalchemy.engine import URL


def libpq(url: URL) -> str:
    """The libpq connection string of ``url`` (password included: psycopg must log in)."""
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def job_row(sql, job_id: int) -> dict:
    """The columns of one job that the tests look at; ``wait`` is ``run_at - now()``."""
    cols = (
        "state",
        "dead_reason",
        "attempts",
        "errors",
        "checkpoint",
        "claimed_by",
        "finished",
        "wait",
    )
    row = sql(
        "SELECT state, dead_reason, attempts, errors, checkpoint, claimed_by,"
        " finished_at IS NOT NULL, run_at - now() FROM workerpool_jobs WHERE id = %s",
        job_id,
    )[0]
    return dict(zip(cols, row, strict=True))


def job_state(sql, job_id: int) -> str:
    return sql("SELECT state FROM workerpool_jobs WHERE id = %s", job_id)[0][0]


def states(sql) -> dict[str, int]:
    """How many jobs are in each state (states with none are absent)."""
    return dict(sql("SELECT state, count(*) FROM workerpool_jobs GROUP BY state"))
