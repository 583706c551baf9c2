"""The demo's loop: play requests, cause chaos, refresh the view, until the work settles."""

from __future__ import annotations

import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from types import ModuleType
from typing import TextIO

from workerpool.model.states import LIVE_STATES

from .options import Options
from .process import DRAIN_WAIT, Supervisor
from .scenario import Backend
from .view import LiveView, Sample, sample

TICK = 0.2  # seconds between two passes of the demo's loop (a screen refresh, not a wait)


@dataclass
class Run:
    """Everything the summary needs to know about how the run went."""

    elapsed: float = 0.0
    settled: bool = False
    interrupted: bool = False
    supervisor_exit: int | None = None
    kills: list[tuple[float, int, str]] = field(default_factory=list)
    requests: Counter[str] = field(default_factory=Counter)
    peak_rate: dict[str, float] = field(default_factory=dict)


def settled(now: Sample, cron_queues: set[str]) -> bool:
    """No request-driven work left: nothing pending, processing or waiting to retry."""
    return all(
        counts.get(state, 0) == 0
        for queue, counts in now.counts.items()
        if queue not in cron_queues
        for state in LIVE_STATES
    )


def play(
    options: Options,
    app: ModuleType,
    backend: Backend,
    supervisor: Supervisor,
    view: LiveView,
    rng: random.Random,
) -> Run:
    """Loop until the requests are played and the work they caused has settled (or Ctrl-C)."""
    run = Run()
    cron_queues = {spec.queue for spec in app.pool.crons.values()}
    started = time.monotonic()
    next_kill = options.chaos_every
    try:
        while True:
            elapsed = time.monotonic() - started
            backend.play_due(elapsed)
            if options.chaos and elapsed >= next_kill and elapsed < options.duration:
                supervisor.kill_random_child(rng, elapsed)
                next_kill += options.chaos_every
            with app.pool.engine.connect() as conn:
                now = sample(conn, elapsed)
            view.show(now, status_line(options, supervisor, backend, elapsed))
            for queue in view.queues:
                run.peak_rate[queue] = max(run.peak_rate.get(queue, 0.0), view.rate(queue, now))
            if not supervisor.running():
                break
            if elapsed >= options.duration and backend.done and settled(now, cron_queues):
                run.settled = True
                break
            if elapsed >= options.duration + options.settle_timeout:
                break
            time.sleep(TICK)
    except KeyboardInterrupt:
        run.interrupted = True
    run.elapsed = time.monotonic() - started
    run.kills = list(supervisor.kills)
    run.requests = backend.counts
    return run


def status_line(options: Options, supervisor: Supervisor, backend: Backend, elapsed: float) -> str:
    phase = (
        "requests arriving"
        if not backend.done
        else ("settling" if elapsed < options.duration + options.settle_timeout else "timed out")
    )
    chaos = f"  chaos: {len(supervisor.kills)} workers killed" if options.chaos else ""
    last = f" (last: {supervisor.kills[-1][2]})" if supervisor.kills else ""
    return f"{phase}{chaos}{last if options.chaos else ''}"


def drain(supervisor: Supervisor, out: TextIO) -> int | None:
    """SIGTERM: the supervisor drains and exits. A second Ctrl-C here means stop now (SIGQUIT)."""
    out.write("draining: SIGTERM to the supervisor (Ctrl-C again to stop at once)\n")
    out.flush()
    supervisor.signal(signal.SIGTERM)
    try:
        return supervisor.wait(DRAIN_WAIT)
    except KeyboardInterrupt:
        supervisor.signal(signal.SIGQUIT)
        return supervisor.wait(DRAIN_WAIT)
