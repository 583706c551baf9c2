"""Alembic environment for workerpool's tables (own version table, own metadata)."""

from __future__ import annotations

from alembic import context

from workerpool.client import database_url
from workerpool.migrate import VERSION_TABLE, create_schema, include_object
from workerpool.model.validation import DEFAULT_SCHEMA
from workerpool.process import settings
from workerpool.sql import db
from workerpool.sql.schema import metadata

config = context.config


def _migrate(**options) -> None:
    """Run the migrations with workerpool's metadata and its own version table (in the pool's
    schema: the connection's search_path puts the tables there, and names it for the version
    table, so that two schemas of one database keep two histories)."""
    schema = config.attributes.get("schema", DEFAULT_SCHEMA)
    if schema != DEFAULT_SCHEMA:
        options["version_table_schema"] = schema
    context.configure(
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        include_object=include_object,
        **options,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    url = database_url(config.get_main_option("sqlalchemy.url") or None)
    _migrate(url=str(url), literal_binds=True)


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        return _run(connection)
    url = database_url(config.attributes.get("url") or None)
    engine = db.create(url, pooled=settings.transaction_pooling(), check_schema=False)
    with engine.connect() as conn:
        _run(conn)
    engine.dispose()


def _run(connection) -> None:
    create_schema(connection, config.attributes.get("schema", DEFAULT_SCHEMA))
    _migrate(connection=connection, compare_type=True, compare_server_default=True)


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
