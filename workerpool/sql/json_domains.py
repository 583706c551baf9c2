"""The jobs table's json columns whose rules are domains (migration 0024)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import TypeDecorator
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.compiler import compiles


class JsonDomain(TypeDecorator):
    """A jsonb column typed as a domain whose CHECK holds the column's rule (migration 0024).

    PostgreSQL evaluates a table's CHECK constraints on every UPDATE, whatever columns it sets,
    so a claim, an outcome write or a lease renewal measured the payload (detoasted and written
    out as text) and the error history again: with a 16 kB payload that was a third of the
    server's CPU per job (``scripts/table_weight.py``). A domain's CHECK runs only when a value
    is written to the column. To SQLAlchemy the column is JSONB (its binds, casts and
    operators); its DDL name, which Alembic compares with the database's, is the domain's.
    """

    impl = JSONB
    cache_ok = True

    def __init__(self, domain: str) -> None:
        super().__init__()
        self.domain = domain

    def coerce_compared_value(self, op: Any, value: Any) -> Any:
        """As JSONB's: ``errors[-1]`` binds an integer, not a json value."""
        return self.impl_instance.coerce_compared_value(op, value)


@compiles(JsonDomain, "postgresql")
def _domain_name(type_: JsonDomain, compiler: Any, **kw: Any) -> str:
    return type_.domain
