"""`workerpool web`: serve the dashboard with uvicorn, refusing an open bind without a token."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import uvicorn

from . import app
from .security import check_bind, token_from_env

DEFAULT_BIND = "127.0.0.1"
DEFAULT_PORT = 8080


def serve(
    pool: Any,
    *,
    bind: str = DEFAULT_BIND,
    port: int = DEFAULT_PORT,
    read_only: bool = False,
    hosts: Sequence[str] = (),
) -> None:
    """Run the dashboard until interrupted (checks first: nothing listens on a refusal).
    ``hosts``: Host names served besides the loopback ones when there is no token."""
    token = token_from_env()
    check_bind(bind, token)
    pool.url  # resolve the database URL now: a bad one is refused before anything listens
    dashboard = app(
        pool, read_only=read_only, token=token, **({"hosts": list(hosts)} if hosts else {})
    )
    mode = "read-only" if read_only else "read-write"
    print(
        f"workerpool web: serving the dashboard ({mode}) on http://{_host(bind)}:{port}/",
        flush=True,
    )
    # One process: the CSRF secret is this process's; access logs carry no query strings'
    # secrets (there are none: the token travels in a header).
    uvicorn.run(
        dashboard,
        host=bind,
        port=port,
        log_level="warning",
        access_log=False,
        server_header=False,
        proxy_headers=False,
    )


def _host(bind: str) -> str:
    return f"[{bind}]" if ":" in bind else bind
