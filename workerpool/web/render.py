"""Rendering a page: one Jinja2 environment with autoescape on for every template, and what
every page gets (its URL prefix, the CSRF token, the notice left by the last action).

A notice's text stays in the server (:class:`Notices`); the browser carries only a random id
in a cookie. Cookies are not kept apart by port, so a page served on another port of the same
host could set any cookie of the dashboard's: it could then name a notice, never write one.
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from .security import CSRF_COOKIE, CSRF_FIELD

TEMPLATES = Path(__file__).with_name("templates")
NOTICE_COOKIE = "workerpool_notice"
NOTICE_LENGTH = 300
#: Notices kept waiting for their next page; the oldest go first (a redirect never followed).
NOTICES_KEPT = 1000

# autoescape=True for every template whatever its name: a payload, an error message, a task
# name or a queue name is always text on the page.
ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


class Notices:
    """The notices actions left for their next page, each under a random id, read once."""

    def __init__(self) -> None:
        self._texts: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def leave(self, text: str) -> str:
        key = secrets.token_urlsafe(16)
        with self._lock:
            self._texts[key] = text[:NOTICE_LENGTH]
            while len(self._texts) > NOTICES_KEPT:
                self._texts.popitem(last=False)
        return key

    def take(self, key: str) -> str:
        with self._lock:
            return self._texts.pop(key, "")


def prefix(request: Request) -> str:
    """Where the app is mounted ('' at the root): every link starts with it."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def render(request: Request, template: str, context: dict[str, Any], status: int = 200) -> Response:
    csrf = request.app.state.csrf
    nonce, new = csrf.nonce(request.cookies)
    notice_key = request.cookies.get(NOTICE_COOKIE, "")
    notice = request.app.state.notices.take(notice_key) if notice_key else ""
    user = request.scope.get("workerpool.user")
    read_only = request.app.state.read_only or (user is not None and not user.may_act)
    page = ENV.get_template(template).render(
        base=prefix(request),
        read_only=read_only,
        notice=notice,
        user=user.name if user is not None else None,
        csrf_field=CSRF_FIELD,
        csrf_token=csrf.sign(nonce),
        request_path=request.url.path,
        **context,
    )
    response = HTMLResponse(page, status_code=status)
    if new:
        response.set_cookie(
            CSRF_COOKIE, nonce, httponly=True, samesite="strict", path=prefix(request) or "/"
        )
    if notice_key:
        response.delete_cookie(NOTICE_COOKIE, path=prefix(request) or "/")
    return response


def redirect(request: Request, path: str, notice: str) -> Response:
    """303 to ``path`` (within the app), carrying a one-line notice for the next page."""
    response = RedirectResponse(prefix(request) + path, status_code=303)
    response.set_cookie(
        NOTICE_COOKIE,
        request.app.state.notices.leave(notice),
        httponly=True,
        samesite="strict",
        path=prefix(request) or "/",
    )
    return response
