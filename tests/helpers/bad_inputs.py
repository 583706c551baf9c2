"""Bad input to an enqueue, each with the named error and the words its one line must hold:
the sync and the async enqueue are held to the same table."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from workerpool import InvalidJob, PayloadError, PayloadTooLarge, UnknownTask

#: ``(enqueue's arguments, its options, the error, a regular expression of its message)``
BAD_INPUTS = [
    (("send", [1, 2]), {}, PayloadError, "JSON object"),
    (("send", {"a": {1, 2}}), {}, PayloadError, r"\$\.a: set"),
    (("send", {"items": [1, 2, 3, b"x"]}), {}, PayloadError, r"\$\.items\[3\]: bytes"),
    (("send", {"x": math.nan}), {}, PayloadError, r"\$\.x: nan"),
    (("send", {"x": math.inf}), {}, PayloadError, r"\$\.x: inf"),
    (("send", {"x": "a\x00b"}), {}, PayloadError, "u0000"),
    (("send", {"x": "\ud800"}), {}, PayloadError, "surrogate"),
    (("send", {1: "int key"}), {}, PayloadError, "not a string"),
    (("send", {"x": "y" * 70_000}), {}, PayloadTooLarge, "over the limit of 65536"),
    (("nope", {}), {}, UnknownTask, "nope"),
    (("send", {}), {"run_at": datetime(2030, 1, 1)}, InvalidJob, "timezone-aware"),
    (("send", {}), {"key": ""}, PayloadError, "key"),
    (("send", {}), {"key": "k" * 256}, PayloadError, "key"),
    (("send", {}), {"key": 5}, PayloadError, "key"),
    (("send", {}), {"max_attempts": 0}, InvalidJob, "max_attempts"),
    (("send", {}), {"max_attempts": -3}, InvalidJob, "max_attempts"),
    (("send", {}), {"max_attempts": True}, InvalidJob, "max_attempts"),
    (("send", {}), {"priority": 10**6}, InvalidJob, "priority"),
    (("send", {}), {"delay": -1}, InvalidJob, "delay"),
    (("send", {}), {"delay": 1e300}, InvalidJob, "delay must be within"),
    (
        ("send", {}),
        {"delay": 1, "run_at": datetime(2030, 1, 1, tzinfo=UTC)},
        InvalidJob,
        "not both",
    ),
]
