"""Which revision of workerpool's tables a database holds, and how to tell a statement that
failed because they are missing or older than this code from any other failure.

The revisions themselves (which is the head, which are older) are Alembic's:
:mod:`workerpool.migrate` compares them.
"""

from __future__ import annotations

import psycopg
from sqlalchemy import Connection, text
from sqlalchemy import exc as sa_exc

VERSION_TABLE = "workerpool_alembic_version"
#: What a statement on a database without workerpool's tables (or with older ones) raises:
#: psycopg's own on the compiled paths, SQLAlchemy's wrapper elsewhere (:func:`is_missing`).
ERRORS = (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn, sa_exc.ProgrammingError)

# exists: a table, looked up without an error that would abort the transaction.
_EXISTS = text("SELECT to_regclass(:name) IS NOT NULL")
# current: Alembic's one row. Index: none (one row).
_CURRENT = text(f"SELECT version_num FROM {VERSION_TABLE}")


def is_missing(exc: BaseException) -> bool:
    """Whether ``exc`` says a table, column or function (a migration's) does not exist."""
    orig = getattr(exc, "orig", None) or exc
    return isinstance(
        orig,
        psycopg.errors.UndefinedTable
        | psycopg.errors.UndefinedColumn
        | psycopg.errors.UndefinedFunction,
    )


def current(conn: Connection) -> str | None:
    """The revision of workerpool's tables in the connection's schema, None without them."""
    if not conn.execute(_EXISTS, {"name": VERSION_TABLE}).scalar():
        return None
    return conn.execute(_CURRENT).scalar()


def has_jobs_table(conn: Connection) -> bool:
    """Whether workerpool's jobs table is there (without a version table of its own, an
    application's Alembic history carries workerpool's revisions)."""
    return bool(conn.execute(_EXISTS, {"name": "workerpool_jobs"}).scalar())
