"""The live view: per-queue counts and throughput while the demo runs."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TextIO

from sqlalchemy import Connection

from workerpool import sql as queries
from workerpool.model.states import JobState

SHOWN_STATES = (
    JobState.PENDING,
    JobState.PROCESSING,
    JobState.DONE,
    JobState.FAILED,
    JobState.DEAD,
)
FINISHED_STATES = (JobState.DONE, JobState.DEAD)


@dataclass
class Sample:
    at: float
    counts: dict[str, dict[str, int]]  # queue -> state -> count


def sample(conn: Connection, elapsed: float) -> Sample:
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    for row in queries.count_by_queue_and_state(conn):
        counts[row.queue][row.state] = row.count
    return Sample(elapsed, dict(counts))


@dataclass
class LiveView:
    """Per-queue counts and throughput: redrawn in place on a terminal, else a line every 2 s."""

    out: TextIO
    queues: list[str]
    tty: bool = False
    history: list[Sample] = field(default_factory=list)
    _drawn: int = 0
    _last_line: float = -10.0

    def show(self, now: Sample, status: str) -> None:
        self.history.append(now)
        self.history = [s for s in self.history if now.at - s.at <= 2.0]
        lines = self.render(now, status)
        if self.tty:
            if self._drawn:
                self.out.write(f"\x1b[{self._drawn}F\x1b[J")
            self.out.write("\n".join(lines) + "\n")
            self._drawn = len(lines)
        elif now.at - self._last_line >= 2.0:
            self.out.write(self.one_line(now, status) + "\n")
            self._last_line = now.at
        self.out.flush()

    def rate(self, queue: str, now: Sample) -> float:
        first = self.history[0]
        span = now.at - first.at
        if span <= 0:
            return 0.0
        before = sum(first.counts.get(queue, {}).get(s, 0) for s in FINISHED_STATES)
        after = sum(now.counts.get(queue, {}).get(s, 0) for s in FINISHED_STATES)
        return (after - before) / span

    def render(self, now: Sample, status: str) -> list[str]:
        head = f"{'queue':<15}" + "".join(f"{s:>11}" for s in SHOWN_STATES) + f"{'jobs/s':>9}"
        lines = [f"workerpool demo  {now.at:6.1f} s  {status}", head]
        for queue in self.queues:
            counts = now.counts.get(queue, {})
            cells = "".join(f"{counts.get(s, 0):>11}" for s in SHOWN_STATES)
            lines.append(f"{queue:<15}{cells}{self.rate(queue, now):>9.1f}")
        return lines

    def one_line(self, now: Sample, status: str) -> str:
        parts = []
        for queue in self.queues:
            counts = now.counts.get(queue, {})
            states = " ".join(f"{s}={counts.get(s, 0)}" for s in SHOWN_STATES)
            parts.append(f"{queue}: {states} ({self.rate(queue, now):.1f}/s)")
        return f"[{now.at:5.1f}s] {status} | " + " | ".join(parts)
