"""Where the database is and how to connect to it.

The URL comes from the argument, else ``$WORKERPOOL_DATABASE_URL``, else an embedded PostgreSQL
started with ``pgserver`` under ``.workerpool/``. The password is never logged: use
:func:`redact` on anything that shows a URL.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import URL, make_url

from ..model.errors import ConfigError, DatabaseNotConfigured

log = logging.getLogger("workerpool.db")

URL_ENV = "WORKERPOOL_DATABASE_URL"
EMBEDDED_DIR_ENV = "WORKERPOOL_EMBEDDED_DIR"
PGBOUNCER_ENV = "WORKERPOOL_PGBOUNCER"
DEFAULT_EMBEDDED_DIR = ".workerpool/pgdata"

#: libpq settings that bound every network wait, so a black-holed connection errors out.
CONNECT_ARGS = {
    "connect_timeout": 5,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,
}


def resolve_url(url: str | URL | None = None) -> URL:
    """The SQLAlchemy URL to use: argument → environment → embedded PostgreSQL."""
    raw = url if url is not None else os.environ.get(URL_ENV) or None
    if raw is None:
        return embedded_url()
    try:
        parsed = make_url(raw)
    except Exception:
        raise ConfigError("database URL is not a valid URL (value hidden)") from None
    return normalise(parsed)


def normalise(url: URL) -> URL:
    """Use the psycopg 3 driver for any PostgreSQL URL."""
    if url.get_backend_name() not in ("postgresql", "postgres"):
        raise ConfigError(f"database URL must be PostgreSQL, got {url.get_backend_name()!r}")
    return url.set(drivername="postgresql+psycopg")


def redact(url: str | URL) -> str:
    """The URL as text with its password replaced by ***."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<unparseable URL>"


def embedded_dir() -> Path:
    return Path(os.environ.get(EMBEDDED_DIR_ENV, DEFAULT_EMBEDDED_DIR)).absolute()


def embedded_url() -> URL:
    """Start (or attach to) the private PostgreSQL under ``.workerpool/`` and return its URL."""
    try:
        import pgserver
    except ImportError:
        raise DatabaseNotConfigured(
            f"set {URL_ENV}, or install the embedded PostgreSQL: pip install 'workerpool[embedded]'"
        ) from None
    data_dir = embedded_dir()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():  # pgserver's platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        server = pgserver.get_server(data_dir, cleanup_mode=None)
    log.debug("embedded PostgreSQL at %s", data_dir)
    return normalise(make_url(server.get_uri()))


def transaction_pooling() -> bool:
    """``$WORKERPOOL_PGBOUNCER=1``: connections go through PgBouncer in transaction pooling mode.

    Then no session state is used: no server-side prepared statements and no LISTEN (workers
    rely on polling; NOTIFY at enqueue is harmless and stays).
    """
    return os.environ.get(PGBOUNCER_ENV, "").lower() in ("1", "true", "yes", "on")


def startup_options(url: URL, settings: Mapping[str, str]) -> str:
    """libpq ``options`` setting ``settings``, after any ``options`` the URL already carries."""
    given = str(url.query.get("options", ""))
    ours = " ".join(f"-c {name}={value}" for name, value in settings.items())
    return f"{given} {ours}".strip()


def engine_options(url: URL, *, application_name: str, pool_size: int,
                   connect_timeout: int | None, session_settings: Mapping[str, str] | None
                   ) -> dict[str, Any]:
    """The keyword arguments of ``create_engine`` (sync or async) for :func:`create`."""
    args: dict[str, Any] = dict(CONNECT_ARGS, application_name=application_name)
    if connect_timeout is not None:
        args["connect_timeout"] = connect_timeout
    if transaction_pooling():
        args["prepare_threshold"] = None
    elif session_settings:
        args["options"] = startup_options(url, session_settings)
    if on_unix_socket(url):
        args.pop("tcp_user_timeout")  # unix socket: no TCP
    return {"connect_args": args, "pool_pre_ping": True, "pool_size": pool_size,
            "max_overflow": pool_size, "pool_recycle": 3600}


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


def create_async(url: URL, *, application_name: str = "workerpool", pool_size: int = 5) -> Any:
    """An ``AsyncEngine`` on psycopg's async driver, with the same connection settings as
    :func:`create` (for ``enqueue_async`` without ``conn=``). Needs greenlet, which
    ``SQLAlchemy[asyncio]`` installs."""
    from sqlalchemy.ext.asyncio import create_async_engine

    return create_async_engine(
        url.set(drivername="postgresql+psycopg_async"),
        **engine_options(url, application_name=application_name, pool_size=pool_size,
                         connect_timeout=None, session_settings=None),
    )


def create(url: URL, *, application_name: str = "workerpool", pool_size: int = 5,
           connect_timeout: int | None = None,
           session_settings: Mapping[str, str] | None = None) -> Engine:
    """An engine for one process. Never share it across a fork: build a new one in the child.

    ``connect_timeout``: whole seconds (libpq's unit; it treats 1 as 2), default 5.
    ``session_settings``: server settings every connection starts with (libpq ``options``, no
    round trip), e.g. ``{"statement_timeout": "15s"}``. Behind PgBouncer in transaction pooling
    mode a server session is shared between clients, so they are not applied there.
    """
    engine = create_engine(url, **engine_options(
        url, application_name=application_name, pool_size=pool_size,
        connect_timeout=connect_timeout, session_settings=session_settings,
    ))
    from .single_write import skip_ping_when_asked  # psycopg-only module, loaded with the engine

    return skip_ping_when_asked(engine)
