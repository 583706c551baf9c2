"""What `workerpool demo` was asked to do, checked before anything is written."""

from __future__ import annotations

import re
from dataclasses import dataclass

from workerpool.model.errors import ConfigError

DEFAULT_DATABASE = "workerpool_demo"
DATABASE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


@dataclass(frozen=True)
class Options:
    """The demo's options (the defaults of `workerpool demo`); :meth:`check` validates them."""

    duration: float = 15.0
    users: int = 150
    chaos: bool = False
    chaos_every: float = 3.0
    settle_timeout: float = 90.0
    database: str = DEFAULT_DATABASE
    seed: int | None = None

    def check(self) -> Options:
        if not 1 <= self.duration <= 3600:
            raise ConfigError(f"--duration must be within 1..3600 seconds, got {self.duration:g}")
        if not 10 <= self.users <= 100_000:
            raise ConfigError(f"--users must be within 10..100000, got {self.users}")
        if not 0.5 <= self.chaos_every <= 600:
            raise ConfigError(f"--chaos-every must be within 0.5..600 s, got {self.chaos_every:g}")
        if not 5 <= self.settle_timeout <= 3600:
            raise ConfigError(
                f"--settle-timeout must be within 5..3600 s, got {self.settle_timeout:g}"
            )
        if not DATABASE_NAME.match(self.database):
            raise ConfigError(
                f"--database {self.database!r} must be a plain lower-case name ([a-z_][a-z0-9_]*)"
            )
        return self
