"""Text from the database on a terminal: control characters shown escaped, never obeyed.

A job's error, key, payload or log record is written by code and callers the operator does not
control; printed raw, an escape sequence in one could clear the screen, retitle the window or
hide lines. On a terminal, the command's output goes through :class:`Escaping`, which writes
each such character as ``\\xNN`` (newline, tab and carriage return stay: the output's own
layout and the progress bars use them). Piped output is left exact (``--json`` escapes them
itself).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

#: C0 controls but tab, newline and carriage return; DEL; the C1 controls.
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def escaped(text: str) -> str:
    """``text`` with every control character written as ``\\xNN``."""
    return CONTROL.sub(lambda found: f"\\x{ord(found[0]):02x}", text)


class Escaping:
    """A text stream that escapes control characters before the terminal sees them."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(escaped(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, fileno, encoding...
        return getattr(self._stream, name)


#: Commands that draw on the terminal themselves (the demo's live view) or print no job's text.
DRAWING = ("run", "web", "demo")


@contextmanager
def safe_stdout(command: str) -> Iterator[None]:
    """Escape what ``command`` prints on a terminal, for as long as it runs."""
    if command in DRAWING or not sys.stdout.isatty():
        yield
        return
    original = sys.stdout
    sys.stdout = Escaping(original)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout = original
