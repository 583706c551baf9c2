"""The fault schedule: drawn from a seed before the run starts, so one seed is one schedule.

Only *when* and *what kind* (and a fault's own numbers, such as how long a process stays
stopped) come from the seed; *which* process a fault hits depends on the pids alive at that
moment, chosen by an index drawn from the seed among the live targets in pid order.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

#: Faults any run may inject (against any PostgreSQL server).
PROCESS_FAULTS = (
    "kill_child",
    "stop_child",
    "kill_supervisor",
    "term_supervisor",
    "terminate_backends",
    "blackhole",
)
#: Faults that stop or replace the database server: only against a cluster the run created.
SERVER_FAULTS = ("pg_restart_fast", "pg_restart_immediate", "exhaust_connections")
FAILOVER = "failover"
WEIGHTS = {
    "kill_child": 5,
    "stop_child": 3,
    "kill_supervisor": 2,
    "term_supervisor": 2,
    "terminate_backends": 3,
    "blackhole": 1,
    "pg_restart_fast": 1,
    "pg_restart_immediate": 1,
    "exhaust_connections": 1,
}
#: Quiet seconds at the start (everything boots) and before the end of the fault window.
WARMUP = 3.0
COOLDOWN = 3.0


@dataclass(frozen=True)
class Fault:
    seq: int
    at: float  # seconds after the workload started
    kind: str
    target: int  # index among the live targets of that kind, in pid order
    seconds: float  # how long a process stays stopped, or the connections held

    def describe(self) -> str:
        held = self.kind in ("stop_child", "exhaust_connections")
        extra = f" for {self.seconds:.1f}s" if held else ""
        return f"#{self.seq:<3} t={self.at:6.1f}s  {self.kind}{extra}"


def plan(
    seed: int, duration: float, mean_gap: float, kinds: tuple[str, ...], failover: bool = False
) -> list[Fault]:
    """Faults at exponential gaps (mean ``mean_gap``) within ``duration``: first every kind
    once (in a seeded order, so even a short run covers them all), then kinds by weight.

    With ``failover``, one failover at a seeded time in the second half of the run."""
    rng = random.Random(seed)
    weights = [WEIGHTS[k] for k in kinds]
    first = rng.sample(kinds, len(kinds))
    faults: list[Fault] = []
    at = WARMUP
    end = duration - COOLDOWN
    while True:
        at += rng.expovariate(1.0 / mean_gap)
        if at >= end:
            break
        kind = first.pop() if first else rng.choices(kinds, weights)[0]
        faults.append(
            Fault(0, round(at, 2), kind, rng.randrange(1 << 16), round(rng.uniform(0.5, 5.0), 1))
        )
    if failover and end > WARMUP:
        at = round(rng.uniform(max(WARMUP, duration / 2), end), 2)
        faults.append(Fault(0, at, FAILOVER, 0, 0.0))
        faults.sort(key=lambda f: f.at)
    return [Fault(i + 1, f.at, f.kind, f.target, f.seconds) for i, f in enumerate(faults)]


def as_dicts(faults: list[Fault]) -> list[dict]:
    return [asdict(f) for f in faults]
