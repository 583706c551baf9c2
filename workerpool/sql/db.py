"""How to connect to the database: URLs, engines, and the embedded PostgreSQL.

Whoever calls here says where and how (a URL or none, for the embedded PostgreSQL started with
``pgserver``; whether connections go through PgBouncer): the environment is read by
:mod:`workerpool.process.settings`, never here (``workerpool.client.engines.database_url``
puts the two together). The password is never logged: use :func:`redact` on anything that
shows a URL.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url

from ..model.errors import ConfigError, DatabaseNotConfigured
from ..model.validation import DEFAULT_SCHEMA, SCHEMA_PATTERN

log = logging.getLogger("workerpool.db")


#: libpq settings that bound every network wait, so a black-holed connection errors out.
CONNECT_ARGS = {
    "connect_timeout": 5,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,
}


def resolve_url(url: str | URL | None, *, embedded_dir: Path) -> URL:
    """The SQLAlchemy URL to use: ``url``, else the embedded PostgreSQL in ``embedded_dir``."""
    if url is None:
        return embedded_url(embedded_dir)
    try:
        parsed = make_url(url)
    except Exception:
        raise ConfigError("database URL is not a valid URL (value hidden)") from None
    return normalise(parsed)


def normalise(url: URL) -> URL:
    """Use the psycopg 3 driver for any PostgreSQL URL."""
    if url.get_backend_name() not in ("postgresql", "postgres"):
        raise ConfigError(f"database URL must be PostgreSQL, got {url.get_backend_name()!r}")
    return url.set(drivername="postgresql+psycopg")


#: A query parameter holding a secret: libpq's ``password`` and ``sslpassword``, and any other
#: whose name says password.
_SECRET_PARAMETER = re.compile(r"([?&][^=&]*password[^=&]*=)[^&]*", re.IGNORECASE)


def redact(url: str | URL) -> str:
    """The URL as text with its password replaced by ***, in the authority and in the query
    (``?password=``, ``sslpassword=``)."""
    try:
        shown = make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<unparseable URL>"
    return _SECRET_PARAMETER.sub(r"\1***", shown)


def embedded_url(data_dir: Path) -> URL:
    """Start (or attach to) the private PostgreSQL in ``data_dir`` and return its URL."""
    try:
        import pgserver
    except ImportError:
        raise DatabaseNotConfigured(
            "set WORKERPOOL_DATABASE_URL, or install the embedded PostgreSQL: pip install"
            " 'workerpool[embedded]'"
        ) from None
    # Several processes may start the same server at once (pytest -n 4 on a fresh checkout).
    # pgserver locks its initdb, but not its exists-then-mkdir of the directory nor, under root,
    # its exists-then-useradd of the user it runs PostgreSQL as: on a fresh machine, initdb ran
    # as a uid that /etc/passwd no longer held. One start at a time.
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir.parent / f".{data_dir.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with warnings.catch_warnings():  # its platformdirs warns when XDG_RUNTIME_DIR is unset
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
            server = pgserver.get_server(data_dir, cleanup_mode=None)
    log.debug("embedded PostgreSQL at %s", data_dir)
    return normalise(make_url(server.get_uri()))


def embedded_running(data_dir: Path) -> bool:
    """Whether the embedded server of ``data_dir`` is running."""
    try:
        pid = int((data_dir / "postmaster.pid").read_text().split()[0])
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return False
    return True


def stop_embedded(data_dir: Path) -> bool:
    """Stop the embedded server of ``data_dir`` (a fast shutdown: open sessions are ended).
    Returns whether one was running."""
    if not embedded_running(data_dir):
        return False
    import pgserver

    # run as the owner of the data directory: pgserver runs PostgreSQL as its own user under root
    user = data_dir.owner() if os.geteuid() == 0 else None
    pgserver.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data_dir, user=user)
    return True


@contextmanager
def embedded_for_this_command(configured_url: str | None, data_dir: Path) -> Iterator[bool]:
    """Around a command that may start the embedded server (no ``configured_url``): the server
    is stopped at the end if it was not running before, so the command leaves nothing behind
    that the user did not start. A server that was already running is left running. Yields
    whether the server will be stopped at the end."""
    if configured_url or embedded_running(data_dir):
        yield False
        return
    try:
        yield True
    finally:
        stop_embedded(data_dir)


def in_schema(url: URL, schema: str) -> URL:
    """``url`` whose every connection starts with ``search_path`` = ``schema`` alone (libpq
    ``options``, no round trip), so every statement and Alembic's DDL find and create
    workerpool's objects there; the URL carries it into children, listeners and migrations, and
    :func:`create` checks it on each new connection (:func:`expect_schema`). The default schema
    leaves the URL as it was. ``schema`` must be checked
    (:func:`workerpool.model.validation.check_schema`): it goes into the options unquoted."""
    if schema == DEFAULT_SCHEMA:
        return url
    return url.update_query_dict({"options": startup_options(url, {"search_path": schema})})


def url_schema(url: URL) -> str | None:
    """The schema :func:`in_schema` put in ``url`` (the last ``search_path`` of its options, if
    it is one schema other than the default)."""
    found = None
    for word in str(url.query.get("options", "")).replace("-c ", "-c").split():
        if word.startswith("-csearch_path="):
            found = word.split("=", 1)[1]
    if found is None or found == DEFAULT_SCHEMA or not SCHEMA_PATTERN.match(found):
        return None
    return found


def expect_schema(engine: Engine, schema: str) -> None:
    """Refuse every new connection of ``engine`` whose server session is not in ``schema``: a
    pool must never write into another schema's tables. PgBouncer, told to ignore the startup
    ``options`` (``ignore_startup_parameters``), drops the ``search_path`` the URL carries: the
    server's own setting must say it then (docs/deployment.md)."""

    def check(dbapi_connection: Any, _record: Any) -> None:
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SELECT current_schema()")
            found = cursor.fetchone()[0]
        dbapi_connection.rollback()
        if found is None:
            raise ConfigError(
                f"schema {schema!r} does not exist in this database: run"
                f" `workerpool migrate --schema {schema}`"
            )
        if found != schema:
            raise ConfigError(
                f"the server's search_path puts this session in schema {found!r}, not"
                f" {schema!r}: behind PgBouncer set it on the server, e.g. ALTER ROLE <user> IN"
                f" DATABASE <db> SET search_path = {schema} (docs/deployment.md)"
            )

    event.listen(engine, "connect", check)


def startup_options(url: URL, settings: Mapping[str, str]) -> str:
    """libpq ``options`` setting ``settings``, after any ``options`` the URL already carries."""
    given = str(url.query.get("options", ""))
    ours = " ".join(f"-c {name}={value}" for name, value in settings.items())
    return f"{given} {ours}".strip()


def engine_options(
    url: URL,
    *,
    application_name: str,
    pool_size: int,
    connect_timeout: int | None,
    session_settings: Mapping[str, str] | None,
    pooled: bool = False,
) -> dict[str, Any]:
    """The keyword arguments of ``create_engine`` (sync or async) for :func:`create`.

    ``pooled``: connections go through PgBouncer in transaction pooling mode, where a server
    session is shared: no server-side prepared statements and no startup options."""
    args: dict[str, Any] = dict(CONNECT_ARGS, application_name=application_name)
    if connect_timeout is not None:
        args["connect_timeout"] = connect_timeout
    if pooled:
        args["prepare_threshold"] = None
    elif session_settings:
        args["options"] = startup_options(url, session_settings)
    if on_unix_socket(url):
        args.pop("tcp_user_timeout")  # unix socket: no TCP
    return {
        "connect_args": args,
        "pool_pre_ping": True,
        "pool_size": pool_size,
        "max_overflow": pool_size,
        "pool_recycle": 3600,
    }


def forget(engine: Engine) -> None:
    """In a forked child: let go of ``engine``'s connections (the parent's) without closing
    them."""
    from .autocommit import forget_kept

    forget_kept(engine)
    engine.dispose(close=False)


def on_unix_socket(url: URL) -> bool:
    """Whether ``url`` connects through a unix socket (``?host=/dir``). A multi-host URL
    (``?host=a:5432&host=b:5432``, for failover) gives a tuple of hosts: any TCP host is TCP."""
    hosts = url.query.get("host", ())
    hosts = (hosts,) if isinstance(hosts, str) else hosts
    return bool(hosts) and all(str(h).startswith("/") for h in hosts)


def connect_kwargs(url: URL) -> dict[str, Any]:
    """psycopg's keyword arguments for ``url``, as SQLAlchemy's psycopg dialect builds them
    (a multi-host URL becomes libpq's ``host=a,b port=p,q``). Keyword arguments, not a DSN
    string: the password never sits in text that an error message could echo into the log."""
    from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

    _, kwargs = PGDialect_psycopg().create_connect_args(url)
    return dict(kwargs)


def create_async(
    url: URL, *, application_name: str = "workerpool", pool_size: int = 5, pooled: bool = False
) -> Any:
    """An ``AsyncEngine`` on psycopg's async driver, with the same connection settings as
    :func:`create` (for ``enqueue_async`` without ``conn=``). Needs greenlet, which
    ``SQLAlchemy[asyncio]`` installs."""
    from sqlalchemy.ext.asyncio import create_async_engine

    return create_async_engine(
        url.set(drivername="postgresql+psycopg_async"),
        **engine_options(
            url,
            application_name=application_name,
            pool_size=pool_size,
            connect_timeout=None,
            session_settings=None,
            pooled=pooled,
        ),
    )


def create(
    url: URL,
    *,
    application_name: str = "workerpool",
    pool_size: int = 5,
    connect_timeout: int | None = None,
    session_settings: Mapping[str, str] | None = None,
    pooled: bool = False,
    check_schema: bool = True,
) -> Engine:
    """An engine for one process. Never share it across a fork: build a new one in the child.

    ``connect_timeout``: whole seconds (libpq's unit; it treats 1 as 2), default 5.
    ``session_settings``: server settings every connection starts with (libpq ``options``, no
    round trip), e.g. ``{"statement_timeout": "15s"}``. Behind PgBouncer in transaction pooling
    mode (``pooled``) a server session is shared between clients, so they are not applied
    there, and statements are not prepared on the server. ``check_schema``: refuse connections
    outside the schema the URL names (:func:`expect_schema`); off only for the migration,
    which creates it.
    """
    options = engine_options(
        url,
        application_name=application_name,
        pool_size=pool_size,
        connect_timeout=connect_timeout,
        session_settings=session_settings,
        pooled=pooled,
    )
    from .autocommit import ping_on_checkout  # psycopg-only module, loaded with the engine

    engine = ping_on_checkout(create_engine(url, **dict(options, pool_pre_ping=False)))
    schema = url_schema(url)
    if schema is not None and check_schema:
        expect_schema(engine, schema)
    return engine
