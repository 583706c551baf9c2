"""Who is looking at the dashboard, and whether they may act: the optional user resolver.

``app(pool, user=resolve)``: ``resolve(request)`` returns a :class:`User` (or a ``(name,
access)`` tuple; it may be a coroutine function), or None for nobody. ``access`` is
``"admin"`` (may act) or ``"read_only"`` (may only read). Nobody gets 403 on every page; a
read-only user's POST gets 403 before its form is read, so nothing is written. Without a
resolver every visitor is an admin recorded as ``web@<client address>``.

Every request runs inside :func:`workerpool.model.audit.acting` with the user's name and source
``web``, so whatever operation an action calls records who it was.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from ..model.audit import acting, check_actor
from ..model.errors import ConfigError, InvalidActor

log = logging.getLogger("workerpool.web")

ACCESS = ("admin", "read_only")
SCOPE_KEY = "workerpool.user"


@dataclass(frozen=True)
class User:
    """A dashboard user: ``name`` (recorded in the audit trail) and ``access``."""

    name: str
    access: str = "admin"

    def __post_init__(self) -> None:
        check_actor(self.name)
        if self.access not in ACCESS:
            raise InvalidActor(f"access must be one of {', '.join(ACCESS)}; got {self.access!r}")

    @property
    def may_act(self) -> bool:
        return self.access == "admin"


def check_resolver(resolver: Any) -> Callable[[Request], Any] | None:
    if resolver is not None and not callable(resolver):
        raise ConfigError(f"user= must be a callable(request) -> User | None, got {resolver!r}")
    return resolver


def user_of(request: Request) -> User | None:
    """The user the resolver named for this request (None without a resolver)."""
    return request.scope.get(SCOPE_KEY)


def actor_of(request: Request) -> str:
    user = user_of(request)
    if user is not None:
        return user.name
    return f"web@{request.client.host if request.client else '?'}"


class Access:
    """ASGI middleware: resolve the user, refuse nobody and a read-only user's action."""

    def __init__(self, app: Any, resolver: Callable[[Request], Any] | None) -> None:
        self.app = app
        self.resolver = resolver

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            user = await self._resolve(scope)
        except Exception:
            log.exception("dashboard user resolver failed", extra={"event": "web_user_failed"})
            await _refuse(send, 500, "internal error: the user resolver failed (see the log)")
            return
        if self.resolver is not None and user is None:
            await _refuse(send, 403, "forbidden: not signed in (the user resolver named nobody)")
            return
        if user is not None and not user.may_act and scope["method"] not in ("GET", "HEAD"):
            await _refuse(send, 403, f"forbidden: {user.name} has read-only access")
            return
        scope[SCOPE_KEY] = user
        with acting(user.name if user is not None else _client(scope), "web"):
            await self.app(scope, receive, send)

    async def _resolve(self, scope: Any) -> User | None:
        if self.resolver is None:
            return None
        found = self.resolver(Request(scope))
        if inspect.isawaitable(found):
            found = await found
        if found is None or isinstance(found, User):
            return found
        if isinstance(found, tuple) and len(found) == 2:
            return User(*found)
        raise ConfigError(
            f"the user resolver returned {found!r}: return a User, a (name, access) tuple or None"
        )


def _client(scope: Any) -> str:
    client = scope.get("client")
    return f"web@{client[0] if client else '?'}"


async def _refuse(send: Any, status: int, line: str) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8")],
        }
    )  # Guard adds the safe headers
    await send({"type": "http.response.body", "body": line.encode() + b"\n"})
