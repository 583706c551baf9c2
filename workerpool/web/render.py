"""Rendering a page: one Jinja2 environment with autoescape on for every template, and what
every page gets (its URL prefix, the CSRF token, the notice left by the last action)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from .security import CSRF_COOKIE, CSRF_FIELD

TEMPLATES = Path(__file__).with_name("templates")
NOTICE_COOKIE = "workerpool_notice"
NOTICE_LENGTH = 300

# autoescape=True for every template whatever its name: a payload, an error message, a task
# name or a queue name is always text on the page.
ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                         undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def prefix(request: Request) -> str:
    """Where the app is mounted ('' at the root): every link starts with it."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def render(request: Request, template: str, context: dict[str, Any],
           status: int = 200) -> Response:
    csrf = request.app.state.csrf
    nonce, new = csrf.nonce(request.cookies)
    notice = unquote(request.cookies.get(NOTICE_COOKIE, ""))[:NOTICE_LENGTH]
    user = request.scope.get("workerpool.user")
    read_only = request.app.state.read_only or (user is not None and not user.may_act)
    page = ENV.get_template(template).render(
        base=prefix(request), read_only=read_only, notice=notice,
        user=user.name if user is not None else None,
        csrf_field=CSRF_FIELD, csrf_token=csrf.sign(nonce), request_path=request.url.path,
        **context)
    response = HTMLResponse(page, status_code=status)
    if new:
        response.set_cookie(CSRF_COOKIE, nonce, httponly=True, samesite="strict",
                            path=prefix(request) or "/")
    if notice:
        response.delete_cookie(NOTICE_COOKIE, path=prefix(request) or "/")
    return response


def redirect(request: Request, path: str, notice: str) -> Response:
    """303 to ``path`` (within the app), carrying a one-line notice for the next page."""
    response = RedirectResponse(prefix(request) + path, status_code=303)
    response.set_cookie(NOTICE_COOKIE, quote(notice[:NOTICE_LENGTH]), httponly=True,
                        samesite="strict", path=prefix(request) or "/")
    return response
