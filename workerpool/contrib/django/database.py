"""The database URL of a Django database alias, for the backend's WorkerPool: by default the
jobs live in the database Django already uses."""

from __future__ import annotations

from typing import Any

from django.db import connections
from sqlalchemy.engine import URL


def url_of(alias: str) -> URL:
    """``DATABASES[alias]`` as a psycopg 3 URL (a socket directory or several hosts go to the
    query, as libpq takes them)."""
    settings = connections[alias].settings_dict
    host, port = str(settings.get("HOST") or ""), str(settings.get("PORT") or "")
    query: dict[str, Any] = {
        key: str(value)
        for key, value in (settings.get("OPTIONS") or {}).items()
        if isinstance(value, str | int) and not isinstance(value, bool)
    }
    in_query = host.startswith("/") or "," in host or "," in port
    if in_query:
        query.update({k: v for k, v in (("host", host), ("port", port)) if v})
    return URL.create(
        "postgresql+psycopg",
        username=settings.get("USER") or None,
        password=settings.get("PASSWORD") or None,
        host=None if in_query else host or None,
        port=None if in_query or not port else int(port),
        database=settings.get("NAME"),
        query=query,
    )


__all__ = ["url_of"]
