"""The demo's own database: created fresh on each run, on the configured or embedded server."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, create_engine, text
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

from workerpool.client import database_url
from workerpool.model.errors import ConfigError, first_line
from workerpool.process import settings
from workerpool.sql import db

#: The example's hourly sweep runs every 3 seconds in the demo (croniter's sixth field: seconds).
DEMO_ENVIRONMENT = {"SESSION_CLEANUP_SCHEDULE": "* * * * * */3"}


#: Written on the database the demo creates; it drops a database only if this mark is on it.
DEMO_MARK = "created by workerpool demo: dropped and re-created by each run"


def fresh_database(name: str) -> URL:
    """Create (or re-create) the demo's database ``name``; no other database is touched.

    An existing database is dropped only if it carries :data:`DEMO_MARK` (the comment the demo
    writes on a database it created); any other is refused, whatever its name."""
    with warnings.catch_warnings():  # pgserver's platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        server = database_url()
    if server.database == name:
        raise ConfigError(f"the server URL names database {name!r} already: use another --database")
    admin = create_engine(server, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            _recreate(conn, name)
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(
            f"cannot create database {name!r} on {db.redact(server)}: {first_line(exc)}"
        ) from None
    finally:
        admin.dispose()
    return server.set(database=name)


def _recreate(conn: Connection, name: str) -> None:
    quoted = conn.dialect.identifier_preparer.quote(name)
    found = conn.execute(
        text("SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = :name"),
        {"name": name},
    ).first()
    if found is not None:
        if found[0] != DEMO_MARK:
            raise ConfigError(
                f"database {name!r} exists and was not created by workerpool demo: refusing to "
                "drop it (choose another --database, or drop it yourself)"
            )
        conn.exec_driver_sql(f"DROP DATABASE {quoted} WITH (FORCE)")
    conn.exec_driver_sql(f"CREATE DATABASE {quoted}")
    # utility statements take no bind parameters; the mark is a constant without quotes
    conn.exec_driver_sql(f"COMMENT ON DATABASE {quoted} IS '{DEMO_MARK}'")


def url_text(url: URL) -> str:
    return url.render_as_string(hide_password=False)


def shown_url(url: URL) -> str:
    """The URL to print: a password is masked (in the query too); the embedded server's empty
    one is shown as is."""
    return db.redact(url if url.password else url._replace(password=None))


@contextmanager
def demo_environment(url: URL) -> Iterator[None]:
    """Point this process (and the supervisor it starts) at the demo database and schedule."""
    wanted = {settings.URL_ENV: url_text(url), **DEMO_ENVIRONMENT}
    before = {name: os.environ.get(name) for name in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
