"""The dashboard's query box: ``task:send queue:email tag:vip key:inv-7 state:dead
reason:exhausted batch:12 workflow:40 args.user.id:42`` → the jobs list's filters, ANDed.

Terms are split as a shell splits words (``shlex``: quote a value with spaces,
``key:"a b"``). ``args.PATH:VALUE`` matches jobs whose payload holds VALUE at PATH (JSON
containment, ``payload @> {"user": {"id": 42}}``); VALUE is read as JSON when it is JSON
(``42``, ``true``; the text ``"42"``, written ``'"42"'`` since the quotes group words), else
as text. The query is bounded: at most :data:`MAX_TERMS`
terms, :data:`MAX_ARGS` of them on the payload, paths of at most :data:`MAX_DEPTH` names.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from ..model.errors import InvalidFilter

#: The qualifiers and the jobs list's field each sets.
QUALIFIERS = {
    "task": "task",
    "queue": "queue",
    "tag": "tag",
    "key": "key",
    "state": "state",
    "reason": "reason",
    "batch": "batch",
    "workflow": "workflow",
}
MAX_QUERY = 1000
MAX_TERMS = 10
MAX_ARGS = 3
MAX_DEPTH = 5


def parse(text: str) -> tuple[dict[str, str], dict[str, Any] | None]:
    """``(fields, payload)``: the list's fields the query sets, and the payload to contain
    (None: no payload term). InvalidFilter (a 400) names the first term it cannot use."""
    if len(text) > MAX_QUERY:
        raise InvalidFilter(f"a query has at most {MAX_QUERY} characters")
    try:
        terms = shlex.split(text)
    except ValueError as exc:
        raise InvalidFilter(f"the query cannot be read: {exc}") from None
    if len(terms) > MAX_TERMS:
        raise InvalidFilter(f"a query has at most {MAX_TERMS} terms; got {len(terms)}")
    fields: dict[str, str] = {}
    payload: dict[str, Any] = {}
    args = 0
    for term in terms:
        name, sep, value = term.partition(":")
        if not sep or not value:
            raise InvalidFilter(
                f"{term!r} is not a term: use qualifier:value (qualifiers:"
                f" {', '.join(QUALIFIERS)}, args.PATH)"
            )
        if name.startswith("args."):
            args += 1
            if args > MAX_ARGS:
                raise InvalidFilter(f"a query has at most {MAX_ARGS} args terms")
            _contain(payload, _path(name), _value(value))
        elif name in QUALIFIERS:
            if QUALIFIERS[name] in fields:
                raise InvalidFilter(f"{name}: is given twice")
            fields[QUALIFIERS[name]] = value
        else:
            raise InvalidFilter(
                f"unknown qualifier {name!r}: use one of {', '.join(QUALIFIERS)}, args.PATH"
            )
    return fields, payload or None


def _path(name: str) -> list[str]:
    path = name.split(".")[1:]
    if not path or any(not part for part in path) or len(path) > MAX_DEPTH:
        raise InvalidFilter(
            f"{name!r}: a payload path is args. and 1 to {MAX_DEPTH} names (args.user.id)"
        )
    return path


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _contain(payload: dict[str, Any], path: list[str], value: Any) -> None:
    node = payload
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise InvalidFilter(f"args.{'.'.join(path)} crosses a value given before")
        node = child
    if path[-1] in node:
        raise InvalidFilter(f"args.{'.'.join(path)} is given twice")
    node[path[-1]] = value


def looks_like_query(text: str) -> bool:
    """Whether the header's search box got a query (a qualifier) rather than an id or a key."""
    try:
        terms = shlex.split(text)
    except ValueError:
        return False
    return bool(terms) and all(
        term.partition(":")[0] in QUALIFIERS or term.startswith("args.") for term in terms
    )
