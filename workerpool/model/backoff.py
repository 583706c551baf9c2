"""Retry delays: capped exponential backoff with jitter, finite for any attempt number."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from .errors import MAX_DELAY, ConfigError


@dataclass(frozen=True)
class Backoff:
    """Delay before retry n is ``min(cap, base * factor**(n-1))``, then jittered.

    ``jitter`` is the fraction of the window that is random: 0.5 (the default) picks uniformly in
    the upper half of the window, so failures that happened together do not retry together.
    """

    base: float = 30.0
    factor: float = 4.0
    cap: float = 3600.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        for name in ("base", "factor", "cap", "jitter"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"Backoff.{name} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise ConfigError(f"Backoff.{name} must be finite, got {value!r}")
        if self.base < 0 or self.cap < self.base:
            raise ConfigError(
                f"Backoff needs 0 <= base <= cap, got base={self.base} cap={self.cap}"
            )
        if self.cap > MAX_DELAY:
            raise ConfigError(f"Backoff.cap must be at most {MAX_DELAY:.0f}s, got {self.cap}")
        if self.factor < 1:
            raise ConfigError(f"Backoff.factor must be >= 1, got {self.factor}")
        if not 0 <= self.jitter <= 1:
            raise ConfigError(f"Backoff.jitter must be within [0, 1], got {self.jitter}")

    def window(self, attempt: int) -> float:
        """The un-jittered delay after failed attempt ``attempt`` (1-based), never overflowing."""
        n = max(1, attempt) - 1
        if self.factor == 1 or self.base == 0:
            return min(self.cap, self.base)
        # Compare exponents in log space so a huge n never builds a huge float.
        if n * math.log(self.factor) >= math.log(self.cap / self.base):
            return self.cap
        return min(self.cap, self.base * self.factor**n)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """The jittered delay in seconds: uniform in ``[window*(1-jitter), window]``."""
        window = self.window(attempt)
        rand = (rng or random).random()
        return window * (1 - self.jitter * rand)
