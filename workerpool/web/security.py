"""The dashboard's guards: authentication, CSRF tokens on every action, and safe headers.

- **Authentication** (:class:`Guard`): with a token configured (``WORKERPOOL_WEB_TOKEN``) every
  request must carry it, as ``Authorization: Bearer <token>`` or as the password of HTTP basic
  auth (any user name: a browser asks for it). Compared with :func:`hmac.compare_digest`.
- **CSRF** (:class:`Csrf`): a random nonce lives in a ``SameSite=Strict`` cookie; each form
  carries ``HMAC(secret, nonce)``. A POST whose field does not match its cookie, or whose
  ``Origin`` names another host, is refused with 403. The secret is made per process (or given,
  for an app served by several processes).
- **Binding** (:func:`check_bind`): a non-loopback address is refused unless a token is set.
- **Host** (:class:`Hosts`): a dashboard anyone on this machine may use (no token, no user
  resolver) answers only requests whose ``Host`` is a loopback name (``localhost``,
  ``*.localhost``, ``127.0.0.1``, ``[::1]``) or one of the ``hosts`` it was given. Otherwise a
  page of another site whose name an attacker points at 127.0.0.1 (DNS rebinding) would be
  same-origin with the dashboard: it could read its pages and post its forms.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import secrets
from collections.abc import Iterable, Mapping
from hashlib import sha256
from typing import Any
from urllib.parse import urlsplit

from ..model.errors import ConfigError
from ..process import settings

TOKEN_ENV = settings.WEB_TOKEN_ENV
CSRF_COOKIE = "workerpool_csrf"
CSRF_FIELD = "csrf_token"
MIN_TOKEN_LENGTH = 16

#: Sent with every response: no inline script or style, no framing, no referrer, no sniffing.
HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
        b" frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]


class CsrfRefused(Exception):
    """A POST without a valid CSRF token."""


def token_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    value = settings.web_token(environ)
    if value is not None and len(value) < MIN_TOKEN_LENGTH:
        raise ConfigError(f"{TOKEN_ENV} must be at least {MIN_TOKEN_LENGTH} characters")
    return value


def check_bind(host: str, token: str | None) -> None:
    """Refuse to listen beyond this machine without authentication."""
    if token is None and not is_loopback(host):
        raise ConfigError(
            f"refusing to bind {host!r} (not a loopback address) without "
            f"authentication: set {TOKEN_ENV}, or bind 127.0.0.1"
        )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def presented_token(headers: Mapping[str, str]) -> str | None:
    """The token a request carries: a Bearer token, or a basic-auth password."""
    scheme, _, value = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
        return decoded.partition(":")[2]
    return None


class Hosts:
    """The ``Host`` names a dashboard answers: loopback names and ``names``, or any (None)."""

    def __init__(self, names: Iterable[str] | None) -> None:
        if isinstance(names, str):
            raise ConfigError(f"hosts= must be a list of host names, not the string {names!r}")
        self.names = None if names is None else {_host_name(name) for name in names}

    def serves(self, headers: Iterable[tuple[bytes, bytes]]) -> bool:
        if self.names is None:
            return True
        given = [value for key, value in headers if key == b"host"]
        if len(given) != 1:
            return False
        name = _host_name(given[0].decode("latin-1"))
        return name in self.names or name.endswith(".localhost") or is_loopback(name)


def _host_name(value: str) -> str:
    """``Example.COM:8080`` -> ``example.com``; ``[::1]:80`` -> ``::1``; junk -> ''."""
    try:
        return (urlsplit(f"//{value.strip()}").hostname or "").rstrip(".")
    except ValueError:
        return ""


class Guard:
    """ASGI middleware: the Host check, authentication (when a token is set), the safe headers.

    ``hosts``: see :class:`Hosts`; the default checks the Host only when nothing else stands
    between a browser on this machine and the actions (no token, no user resolver)."""

    def __init__(self, app: Any, token: str | None, hosts: Hosts | None = None) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.hosts = hosts or Hosts(None)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not self.hosts.serves(scope["headers"]):
            await _refuse_host(send)
            return
        if self.token is not None and not self._authorised(scope):
            await _refuse(send)
            return

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)

    def _authorised(self, scope: Any) -> bool:
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        given = presented_token(headers)
        assert self.token is not None
        return given is not None and hmac.compare_digest(given.encode(), self.token)


async def _refuse(send: Any) -> None:
    body = b"authentication required: send WORKERPOOL_WEB_TOKEN as a Bearer token or password\n"
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"www-authenticate", b'Basic realm="workerpool", charset="UTF-8"'),
                *HEADERS,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _refuse_host(send: Any) -> None:
    body = (
        b"refused: this dashboard serves loopback names only (localhost, 127.0.0.1); pass"
        b" hosts=[...] to workerpool.web.app, or set WORKERPOOL_WEB_TOKEN\n"
    )
    await send(
        {
            "type": "http.response.start",
            "status": 400,
            "headers": [(b"content-type", b"text/plain; charset=utf-8"), *HEADERS],
        }
    )
    await send({"type": "http.response.body", "body": body})


class Csrf:
    """Signed double-submit tokens: the cookie holds a nonce, each form ``HMAC(secret, nonce)``."""

    def __init__(self, secret: bytes | None = None) -> None:
        self.secret = secret or secrets.token_bytes(32)

    def sign(self, nonce: str) -> str:
        return hmac.new(self.secret, nonce.encode(), sha256).hexdigest()

    def nonce(self, cookies: Mapping[str, str]) -> tuple[str, bool]:
        """The request's nonce, and whether it is new (then the response must set it)."""
        given = cookies.get(CSRF_COOKIE, "")
        if len(given) == 43 and given.replace("-", "").replace("_", "").isalnum():
            return given, False
        return secrets.token_urlsafe(32), True

    def check(
        self, cookies: Mapping[str, str], headers: Mapping[str, str], form: Mapping[str, Any]
    ) -> None:
        origin = headers.get("origin")
        if origin and origin != "null" and urlsplit(origin).netloc != headers.get("host"):
            raise CsrfRefused(f"refused: the request comes from another site ({origin})")
        nonce, given = cookies.get(CSRF_COOKIE), form.get(CSRF_FIELD)
        if (
            not nonce
            or not isinstance(given, str)
            or not hmac.compare_digest(given.encode(), self.sign(nonce).encode())
        ):
            raise CsrfRefused(
                "refused: missing or invalid CSRF token (reload the page and try again)"
            )
