"""Who acts: the actor and the source (cli, web, api) an operator's action is recorded under.

The command line and the dashboard say who is acting once, around the whole command or
request (:func:`acting`); every operation called inside (``pool.cancel``, ``pool.pause``,
``dead.retry`` ...) records that actor and source unless it is given ``by=`` explicitly. Plain
Python calls are recorded as source ``api``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from .errors import InvalidActor

SOURCES = ("cli", "web", "api")
MAX_ACTOR = 200

_acting: ContextVar[tuple[str | None, str]] = ContextVar("workerpool_acting", default=(None, "api"))


def check_actor(name: Any) -> str:
    """A name to record: 1 to 200 printable characters."""
    if (
        not isinstance(name, str)
        or not name.strip()
        or len(name) > MAX_ACTOR
        or not name.isprintable()
    ):
        raise InvalidActor(f"actor must be 1 to {MAX_ACTOR} printable characters, got {name!r}")
    return name


@contextmanager
def acting(actor: str | None, source: str) -> Iterator[None]:
    """Record the actions inside as ``actor`` (None: each operation's default) from ``source``."""
    if source not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)}, got {source!r}")
    token = _acting.set((None if actor is None else check_actor(actor), source))
    try:
        yield
    finally:
        _acting.reset(token)


def current_actor() -> str | None:
    return _acting.get()[0]


def current_source() -> str:
    return _acting.get()[1]
