"""A caller's connection (``conn=``) in the pool's schema for the statements of one call.

A pool's own connections start in its schema (``search_path`` in the URL, see
:func:`workerpool.sql.db.in_schema`); a caller's connection is the application's, in the
application's schema. For the length of one call its transaction's ``search_path`` is the
pool's schema alone (``set_config(..., is_local => true)``: transaction-local, no round trip
to undo at commit), then the caller's path is put back, so the caller's own statements after
the call resolve as before. A call that raises leaves it to the rollback, which undoes the
setting with the rest (a savepoint's too). In the default schema nothing is sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from sqlalchemy import Connection, text

from ..model.validation import DEFAULT_SCHEMA

# borrow: the caller's path (read before it changes: the CTE is materialized first), then the
# pool's schema for the rest of the call. Index: none, no table.
_BORROW = text(
    "WITH old AS MATERIALIZED (SELECT current_setting('search_path') AS path)"
    " SELECT path, set_config('search_path', :schema, true) FROM old"
)
# give_back: the caller's path again, for the rest of its transaction. Index: none.
_GIVE_BACK = text("SELECT set_config('search_path', :path, true)")


@contextmanager
def borrowed(conn: Connection | None, schema: str) -> Iterator[None]:
    """Around one call's statements on the caller's ``conn`` (nothing without one)."""
    if conn is None or schema == DEFAULT_SCHEMA or not isinstance(conn, Connection):
        yield  # no conn, or a wrong one: the call refuses it by name
        return
    path = conn.execute(_BORROW, {"schema": schema}).scalar_one()
    yield
    conn.execute(_GIVE_BACK, {"path": path})


@asynccontextmanager
async def borrowed_async(conn: Any, schema: str) -> AsyncIterator[None]:
    """:func:`borrowed` for an ``AsyncConnection``."""
    if conn is None or schema == DEFAULT_SCHEMA or not hasattr(conn, "run_sync"):
        yield
        return
    path = (await conn.execute(_BORROW, {"schema": schema})).scalar_one()
    yield
    await conn.execute(_GIVE_BACK, {"path": path})
