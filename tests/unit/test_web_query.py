"""The dashboard's query box: qualifiers to the jobs list's fields, args.PATH:VALUE to a
payload containment, every bad term refused by name, the query bounded."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette")

from workerpool.model.errors import InvalidFilter
from workerpool.web.query import looks_like_query, parse


def test_qualifiers_and_payload_paths():
    fields, payload = parse(
        'task:send queue:email tag:vip key:"inv 7" state:dead'
        " reason:exhausted args.user.id:42 args.user.name:ann"
        " args.flag:true"
    )
    assert fields == {
        "task": "send",
        "queue": "email",
        "tag": "vip",
        "key": "inv 7",
        "state": "dead",
        "reason": "exhausted",
    }
    assert payload == {"user": {"id": 42, "name": "ann"}, "flag": True}
    assert parse("") == ({}, None)
    assert parse("batch:12 workflow:40")[0] == {"batch": "12", "workflow": "40"}
    assert parse("""args.id:'"42"'""")[1] == {"id": "42"}  # JSON text: the string


@pytest.mark.parametrize(
    ("query", "line"),
    [
        ("send", "'send' is not a term"),
        ("colour:red", "unknown qualifier 'colour'"),
        ("task:a task:b", "task: is given twice"),
        ("args.:1", "a payload path is args. and 1 to 5 names"),
        ("args.a.b.c.d.e.f:1", "a payload path is args. and 1 to 5 names"),
        ("args.a:1 args.a.b:2", "args.a.b crosses a value given before"),
        ("args.a:1 args.b:2 args.c:3 args.d:4", "at most 3 args terms"),
        (" ".join(f"tag:t{n}" for n in range(11)), "at most 10 terms"),
        ('key:"open', "the query cannot be read"),
        ("x" * 1001, "at most 1000 characters"),
    ],
)
def test_a_bad_query_is_refused_by_name(query, line):
    with pytest.raises(InvalidFilter, match=line):
        parse(query)


def test_the_header_box_tells_a_query_from_a_key():
    assert looks_like_query("task:send args.user.id:42")
    assert not looks_like_query("account:42")  # a key with a colon
    assert not looks_like_query("invoice-2026-7")
