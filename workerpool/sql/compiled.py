"""Statements sent as the driver's own SQL, compiled once per dialect.

To find a statement's compiled form in its cache, SQLAlchemy walks the whole expression to
build a cache key on every execution: for a limited claim about 1 ms of the worker's CPU, for
the plain claim and the outcome write tens of microseconds each. The statements a worker or an
enqueue sends over and over (the claims, the outcome write, the inserts, the batch lock) are
compiled here once and sent with ``exec_driver_sql``.
"""

from __future__ import annotations

import functools
from typing import Any


@functools.lru_cache(maxsize=256)
def driver_sql(dialect: Any, statement: Any) -> tuple[str, dict[str, Any]]:
    """``statement`` as the driver's SQL text (``%(name)s`` parameters) and the values of the
    parameters it carries; the caller gives the others. A required parameter (a ``bindparam``
    given no value) is left out, so a caller that forgets it gets the driver's error instead of
    a NULL that would match no row."""
    compiled = statement.compile(dialect=dialect, compile_kwargs={"render_postcompile": True})
    required = {bind.key for bind in compiled.binds.values() if bind.required}
    return str(compiled), {
        name: value for name, value in compiled.params.items() if name not in required
    }
