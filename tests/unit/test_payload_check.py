"""The payload check's fast path (C encode, then witnesses read off the text) must accept and
refuse exactly what the full walk does, with the same message naming the same path."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workerpool import PayloadError, PayloadTooLarge
from workerpool.model import payload as checks

ODD_SCALARS = [
    "\x00",
    "a\\u0000",
    "\ud800",
    "[[[[",
    "{" * 70,
    "9" * 4100,
    10**4005,
    10**3990,
    -(10**4100),
    (1, 2),
    math.nan,
    -math.inf,
    b"x",
    {1, 2},
]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=8),
    st.sampled_from(ODD_SCALARS),
)
KEYS = st.one_of(
    st.text(max_size=4),
    st.integers(),
    st.booleans(),
    st.none(),
    st.floats(),
    st.sampled_from(["\ud800", "\x00", "1", "true"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=4), st.tuples(inner)
    ),
    max_leaves=25,
)


def walk_then_encode(value: object, object_only: bool = True) -> str:
    """The reference: the full walk first, then encode and measure (the pre-fast-path code)."""
    if object_only and not isinstance(value, dict):
        raise PayloadError(f"payload must be a JSON object (dict), got {type(value).__name__}")
    checks.check_value(value, "$", 0, "payload")
    text = checks._ENCODER.encode(value)
    size = len(text.encode("utf-8"))
    if size > checks.DEFAULT_PAYLOAD_LIMIT:
        raise PayloadTooLarge(size, checks.DEFAULT_PAYLOAD_LIMIT)
    return text


def outcome(check, value, **options):
    try:
        return "ok", check(value, **options)
    except (PayloadError, PayloadTooLarge) as exc:
        return type(exc).__name__, str(exc)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.dictionaries(KEYS, VALUES, max_size=5))
def test_fast_path_agrees_with_the_walk(value):
    assert outcome(checks.dumps, value) == outcome(walk_then_encode, value)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(VALUES)
def test_fast_path_agrees_with_the_walk_for_any_value(value):
    got = outcome(checks.dumps, value, object_only=False)
    assert got == outcome(walk_then_encode, value, object_only=False)


def nested(levels: int) -> dict:
    root: dict = {}
    node = root
    for _ in range(levels):
        node["a"] = {}
        node = node["a"]
    return root


def test_depth_limit_is_exact_on_both_paths():
    for levels in (63, 64, 65, 66, 3000):
        assert outcome(checks.dumps, nested(levels)) == outcome(walk_then_encode, nested(levels))
    assert outcome(checks.dumps, nested(64))[0] == "ok"
    assert outcome(checks.dumps, nested(65))[0] == "PayloadError"


def test_a_cycle_is_a_payload_error():
    loop: dict = {}
    loop["self"] = loop
    assert outcome(checks.dumps, loop) == ("PayloadError", outcome(walk_then_encode, loop)[1])


def test_false_alarms_are_accepted_by_the_walk():
    # each trips a fast-path witness, yet is plain JSON: the walk must accept it unchanged
    for value in ({"s": "\\u0000"}, {"s": "{[" * 40}, {"n": "7" * 5000}, {"l": [[1]] * 70}):
        assert checks.dumps(value) == walk_then_encode(value)
