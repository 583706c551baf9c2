"""Checking payloads and keys before anything is written. JSON only, never pickle."""

from __future__ import annotations

import json
import math
from typing import Any

from .errors import PayloadError, PayloadTooLarge

DEFAULT_PAYLOAD_LIMIT = 64 * 1024
MAX_DEPTH = 64
MAX_INT_DIGITS = 4000

#: Built once: ``json.dumps`` with non-default options builds a new encoder on every call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def dumps(
    payload: Any, *, limit: int = DEFAULT_PAYLOAD_LIMIT, what: str = "payload", object_only=True
) -> str:
    """Validate ``payload`` as a JSON object (or any JSON value) and return compact JSON text."""
    if object_only and not isinstance(payload, dict):
        raise PayloadError(f"{what} must be a JSON object (dict), got {type(payload).__name__}")
    check_value(payload, "$", 0, what)
    text = _ENCODER.encode(payload)
    size = len(text.encode("utf-8"))
    if size > limit:
        raise PayloadTooLarge(size, limit)
    return text


def check_value(value: Any, path: str, depth: int, what: str = "payload") -> None:
    """Walk ``value`` and raise PayloadError naming the first path that is not plain JSON."""
    if depth > MAX_DEPTH:
        raise PayloadError(f"{what} {path}: nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, str):
        return check_text(value, path, what)
    if isinstance(value, int):
        if abs(value).bit_length() > MAX_INT_DIGITS * 3.33:
            raise PayloadError(f"{what} {path}: integer too large")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise PayloadError(f"{what} {path}: {value!r} is not valid JSON")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise PayloadError(f"{what} {path}: key {key!r} is not a string")
            check_text(key, f"{path}.{key}", what)
            check_value(item, f"{path}.{key}", depth + 1, what)
        return
    if isinstance(value, list):
        for index, item in enumerate(value):
            check_value(item, f"{path}[{index}]", depth + 1, what)
        return
    raise PayloadError(f"{what} {path}: {type(value).__name__} is not JSON-serialisable")


def check_text(value: str, path: str, what: str = "payload") -> None:
    if "\x00" in value:
        raise PayloadError(f"{what} {path}: contains \\u0000, which PostgreSQL cannot store")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise PayloadError(f"{what} {path}: contains a lone surrogate, not valid UTF-8") from None


def check_key(key: Any) -> str | None:
    """An idempotency key is None or a non-empty string of at most 255 characters."""
    if key is None:
        return None
    if not isinstance(key, str) or not key.strip() or len(key) > 255:
        raise PayloadError(f"key must be a non-empty string of at most 255 characters, got {key!r}")
    check_text(key, "key", "key")
    return key
