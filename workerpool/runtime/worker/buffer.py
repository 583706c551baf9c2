"""How many claimed jobs a child holds beyond its busy handler slots (the prefetch buffer).

An explicit ``prefetch`` is a fixed size. The default (``prefetch=None``) adapts: the buffer
holds as many jobs as the handlers finish during one claim's round trip,

    concurrency x (claim round trip / a handler's run time),

rounded down and bounded by ``MOST_PER_SLOT x concurrency``. The refill then arrives about when
the buffer runs dry, so fast handlers neither idle nor cost a transaction per job; a handler
that runs longer than ``concurrency`` round trips gets no buffer at all. A crash makes every job
the child held a suspect that runs alone (docs/poison.md), so holding no more than a round
trip's worth keeps the extra cost of a crash to about ``concurrency`` round trips of suspects,
and to nothing for slow jobs, which have no buffer.

Both figures are moving averages the main loop updates: the run time from each outcome that
rides with a claim, the round trip from each claim. Until both are known the buffer is 0, as it
is for a queue with limits (a buffered job would count against a limit while no handler runs
it, holding back a slot another replica could use).
"""

from __future__ import annotations

#: The adaptive buffer holds at most this many jobs per handler slot.
MOST_PER_SLOT = 5
RUN_WEIGHT = 0.1  # of each finished job's run time in the moving average
TRIP_WEIGHT = 0.2  # of each claim's round trip in the moving average


class Buffer:
    """The prefetch buffer's current size (``size``) and the most it may ever be (``most``)."""

    def __init__(self, concurrency: int, prefetch: int | None, *, limited: bool) -> None:
        self.concurrency = concurrency
        self.adaptive = prefetch is None and not limited
        if prefetch is not None:
            self.most = prefetch
        else:
            self.most = 0 if limited else MOST_PER_SLOT * concurrency
        self.size = 0 if self.adaptive else self.most
        self.run: float | None = None  # seconds a handler runs a job (moving average)
        self.trip: float | None = None  # seconds a claim takes (moving average)

    @property
    def refill(self) -> int:
        """Claim no fewer rows than this while every handler slot is busy."""
        return max(1, self.size // 2)

    def ran(self, seconds: float) -> None:
        """A handler ran a job for ``seconds``."""
        if self.adaptive:
            self.run = _moved(self.run, seconds, RUN_WEIGHT)

    def claimed(self, seconds: float) -> None:
        """A claim (with the outcomes riding on it) took ``seconds``: resize the buffer."""
        if not self.adaptive:
            return
        self.trip = _moved(self.trip, seconds, TRIP_WEIGHT)
        if self.run is None:
            return
        if self.run <= 0.0:
            self.size = self.most
        else:
            self.size = min(self.most, int(self.concurrency * self.trip / self.run))


def _moved(average: float | None, sample: float, weight: float) -> float:
    return sample if average is None else average + weight * (sample - average)
