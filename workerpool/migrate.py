"""`workerpool migrate`: Alembic upgrade to head with workerpool's own scripts and version table.

An application that runs Alembic for its own tables in the same database passes
:func:`skip_workerpool_tables` as ``include_object=`` (and ``include_name=``) in its ``env.py``,
so its autogenerate never proposes dropping workerpool's tables (docs/deployment.md).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text
from sqlalchemy.engine import URL

from .model.errors import NotMigrated, first_line
from .model.validation import DEFAULT_SCHEMA, check_schema
from .sql import revision
from .sql.schema import metadata

VERSION_TABLE = revision.VERSION_TABLE


def include_object(obj, name, type_, reflected, compare_to) -> bool:
    """Only workerpool's own tables: an application's tables in the same database are not ours."""
    if type_ == "table":
        return name in metadata.tables
    return True


#: Every workerpool table is named so; a database migrated by a newer workerpool may hold tables
#: this version's metadata does not know, and an application's autogenerate must skip them too.
TABLE_PREFIX = "workerpool_"


def is_workerpool_table(name: str | None) -> bool:
    return name is not None and (
        name in metadata.tables or name == VERSION_TABLE or name.startswith(TABLE_PREFIX)
    )


def skip_workerpool_tables(*args: Any) -> bool:
    """An Alembic filter for an application's ``env.py``: False for workerpool's tables (and
    what belongs to them), True for everything else. Usable as both hooks::

        context.configure(..., include_object=skip_workerpool_tables,
                          include_name=skip_workerpool_tables)

    ``include_object(object, name, type_, reflected, compare_to)`` and
    ``include_name(name, type_, parent_names)`` are told apart by their number of arguments.
    """
    if len(args) == 5:
        obj, name, type_ = args[0], args[1], args[2]
        if type_ == "table":
            return not is_workerpool_table(name)
        table = getattr(obj, "table", None)  # an index, constraint or column of a table
        return not is_workerpool_table(getattr(table, "name", None))
    if len(args) == 3:
        name, type_, parent_names = args
        if type_ == "table":
            return not is_workerpool_table(name)
        return not is_workerpool_table((parent_names or {}).get("table_name"))
    raise TypeError(
        "skip_workerpool_tables is Alembic's include_object (5 arguments) or "
        f"include_name (3 arguments), called with {len(args)}"
    )


def versions_location() -> str:
    """The folder of workerpool's revision files, for an application that merges them into its
    own history through ``version_locations`` (docs/deployment.md)."""
    return str(Path(script_location()) / "versions")


def drift(connection: Connection) -> list:
    """Differences between the migrated database and ``schema.metadata`` (empty = no drift).

    Alembic's, plus the tables' storage parameters (``postgresql_with``), which it does not
    compare: ``("modify_storage", table, {name: (model, database)})``.
    """
    context = MigrationContext.configure(
        connection,
        opts={
            "compare_type": True,
            "compare_server_default": True,
            "include_object": include_object,
        },
    )
    return compare_metadata(context, metadata) + storage_drift(connection)


def storage_drift(connection: Connection) -> list:
    """Storage parameters that differ between the model and the database, per table."""
    rows = connection.execute(
        text(
            "SELECT relname, reloptions FROM pg_class WHERE relname = ANY(:names)"
            " AND relkind = 'r' AND pg_table_is_visible(oid)"
        ),
        {"names": list(metadata.tables)},
    ).all()
    found = {name: dict(option.split("=", 1) for option in options or []) for name, options in rows}
    out = []
    for name, table in metadata.tables.items():
        wanted = {k: str(v) for k, v in (table.dialect_options["postgresql"]["with"] or {}).items()}
        actual = found.get(name, {})
        differs = {
            key: (wanted.get(key), actual.get(key))
            for key in wanted.keys() | actual.keys()
            if wanted.get(key) != actual.get(key)
        }
        if name in found and differs:
            out.append(("modify_storage", name, differs))
    return out


def script_location() -> str:
    """The migration scripts: packaged as ``workerpool._alembic``, or ``alembic/`` in a checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "alembic", here / "_alembic"):
        if (candidate / "env.py").exists():
            return str(candidate)
    raise FileNotFoundError(f"workerpool's migration scripts are missing under {here}")


def alembic_config(
    url: URL | None = None, connection: Connection | None = None, schema: str = DEFAULT_SCHEMA
) -> Config:
    """Alembic's configuration for workerpool's scripts. ``schema``: where the tables and the
    version table go (created if missing); ``url`` (or ``connection``) must already put its
    sessions there (:func:`workerpool.sql.db.in_schema`)."""
    cfg = Config()
    cfg.attributes["schema"] = check_schema(schema)
    cfg.set_main_option("script_location", script_location())
    cfg.set_main_option("path_separator", "os")
    cfg.set_main_option("file_template", "%%(year)d%%(month).2d%%(day).2d_%%(rev)s_%%(slug)s")
    if url is not None:
        cfg.attributes["url"] = url
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def upgrade(url: URL, revision: str = "head", *, schema: str = DEFAULT_SCHEMA) -> None:
    command.upgrade(alembic_config(url, schema=schema), revision)


def downgrade(url: URL, revision: str = "base", *, schema: str = DEFAULT_SCHEMA) -> None:
    command.downgrade(alembic_config(url, schema=schema), revision)


def head() -> str:
    """The revision this code's tables are at: the last of workerpool's scripts."""
    found = _scripts().get_current_head()
    assert found is not None
    return found


@functools.cache
def _scripts() -> ScriptDirectory:
    """Workerpool's revision scripts, read once (they ship with the code)."""
    return ScriptDirectory.from_config(alembic_config())


def problem(connection: Connection, schema: str) -> str | None:
    """One line saying why this database cannot serve this code, None when it can: no
    workerpool tables in ``schema``, or tables at an older revision than :func:`head`. A
    revision this code does not know is a newer workerpool's (a superset): not refused."""
    found, want = revision.current(connection), head()
    if found is None:
        return (
            f"the database has no workerpool tables in schema {schema!r}: run `workerpool "
            f"migrate` (revision {want})"
        )
    if found == want or not _known(found):
        return None
    return (
        f"the database's workerpool tables in schema {schema!r} are at revision {found}, "
        f"this code needs {want}: run `workerpool migrate`"
    )


def check(engine: Engine, schema: str) -> None:
    """NotMigrated (one line) unless the database holds this code's tables."""
    with engine.connect() as connection:
        found = problem(connection, schema)
    if found is not None:
        raise NotMigrated(found)


def explain(engine: Engine, schema: str, exc: BaseException) -> NotMigrated:
    """The one-line error for a statement that met missing tables or columns (``exc``): which
    revision the database is at, when it can be read."""
    try:
        with engine.connect() as connection:
            found = problem(connection, schema)
    except Exception:  # the explanation must not hide the failure it explains
        found = None
    return NotMigrated(
        found
        or f"workerpool's tables in schema {schema!r} are missing or older "
        f"than this code ({first_line(getattr(exc, 'orig', None) or exc)})"
        f": run `workerpool migrate`"
    )


def _known(found: str) -> bool:
    try:
        return _scripts().get_revision(found) is not None
    except Exception:  # alembic: "No such revision"
        return False


def create_schema(connection: Connection, schema: str) -> None:
    """The schema, made if missing (committed at once: Alembic's transaction starts after).
    Looked up first: CREATE SCHEMA IF NOT EXISTS needs the database's CREATE privilege even
    when the schema exists, which a migrating role of `workerpool roles` does not have."""
    if schema == DEFAULT_SCHEMA:
        return
    found = connection.execute(
        text("SELECT 1 FROM pg_namespace WHERE nspname = :name"), {"name": schema}
    ).first()
    if found is None:
        connection.execute(text(f"CREATE SCHEMA {check_schema(schema)}"))
    connection.commit()
