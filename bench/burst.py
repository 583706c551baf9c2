"""The kill -9 burst (section ``burst``): a queue's rate before and after its child is SIGKILLed
again and again, and how long the rate takes to come back.

One supervisor (``supervised.Launcher``; the caller picks the queue's concurrency, ``run.py``
leaves the prefetch adaptive) drains ``nap`` jobs, a sleep of ``nap_ms`` each, so that a kill
finds jobs in flight. The backlog never runs dry while the figures are taken: whenever the
pending rows fall below ``AHEAD_S`` of the most the child could take (its concurrency over the
nap), the bench inserts that many more, server-side.

Once the drain has run ``window / 2`` (warm-up) + ``window`` seconds, the queue child is
SIGKILLed ``kills`` times, each time once the (replacement) child holds a job it claimed half a
nap ago: it has told the supervisor it claimed, so it is restarted at once (a child killed
before it claims anything counts as a failed boot: back-off, then FATAL, the supervisor's tests
cover that). Its replacement releases the jobs it held: held with others, each becomes a suspect
and runs alone; held alone, it is charged and held back before it runs again (docs/poison.md).
That, with the restarts, is what the figures price:

- the rate before: done rows over the ``window`` seconds before the first kill;
- the rate after: done rows over the ``window`` seconds after the last kill (target: >= 0.8x
  the rate before);
- the recovery: from the last kill to the start of the first ``window / 2`` (at most 1 s)
  window whose rate is within 20 % of the rate before, windows ``STEP_S`` apart; if the rate is
  not back within ``RECOVERY_LIMIT`` x ``window``, the time waited (a lower bound), with a
  warning;
- the jobs held: the WorkerLost entries the kills left (a job held by two killed children
  counts twice).

Rates come from the rows (``finished_at``, database clock) and the kills' instants are read on
the same clock (``clock_timestamp()``). At the end the backlog drains and every job must be
``done``: anything else raises.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import time
from datetime import datetime, timedelta

from . import app, supervised
from .database import BenchDatabase, every_job
from .report import Report, Target

log = logging.getLogger("workerpool.bench")

BEFORE = "burst_rate_before_jobs_per_s"
AFTER = "burst_rate_after_jobs_per_s"
RECOVERY = "burst_recovery_s"
HELD = "burst_held_jobs"
BACK_WITHIN = 0.8  # "recovered": a window's rate at least this share of the rate before
AHEAD_S = 0.5  # the backlog holds at least this many seconds of the most the child could take
MIN_AHEAD = 20  # ... and never fewer rows
STEP_S = 0.05  # the recovery's windows start this far apart
SETTLED_S = 0.5  # rows finished this long ago are committed (finished_at: the pass's start)
RECOVERY_LIMIT = 12  # x window: how long the rate may take to come back before we stop waiting
POLL_S = 0.02
TOP_UP_EVERY_S = 0.1


def declare(
    report: Report, *, kills: int, window_s: float, nap_ms: float, concurrency: int
) -> None:
    report.declare(
        BEFORE,
        "jobs/s",
        note=f"workerpool run, 1 worker child, concurrency {concurrency}, "
        f"{nap_ms:g} ms jobs; the {window_s:g} s before the first kill",
    )
    report.declare(
        AFTER,
        "jobs/s",
        ratio_to=BEFORE,
        target=Target(">=", BACK_WITHIN, on_ratio=True),
        note=f"the {window_s:g} s after the last of {kills} kill -9s of the child, "
        "each while the (replacement) child held a job",
    )
    report.declare(
        RECOVERY,
        "s",
        note=f"last kill to the first {recovery_window(window_s):g} s window within "
        f"{100 - BACK_WITHIN * 100:.0f} % of the rate before",
    )
    report.declare(
        HELD,
        "jobs",
        note="jobs the killed children held (WorkerLost entries), each run alone after",
    )


def recovery_window(window_s: float) -> float:
    return min(1.0, window_s / 2)


class Backlog:
    """Pending ``nap`` rows, kept at ``AHEAD_S`` of the most the child could take: its
    concurrency over the nap (the real rate is lower, so the queue never runs dry, and what is
    left to drain at the end stays under twice that)."""

    def __init__(self, bench_db: BenchDatabase, nap_ms: float, concurrency: int) -> None:
        self.db, self.nap_ms = bench_db, nap_ms
        self.ahead = max(MIN_AHEAD, math.ceil(concurrency * 1000.0 / nap_ms * AHEAD_S))
        self.inserted = 0
        self._looked = float("-inf")

    def insert(self, count: int) -> None:
        self.db.sql(
            "INSERT INTO workerpool_jobs (queue, task, payload)"
            " SELECT %s, %s, jsonb_build_object('ms', %s::float8)"
            " FROM generate_series(1, %s)",
            (app.QUEUE, app.nap.__name__, self.nap_ms, count),
        )
        self.inserted += count

    def top_up(self) -> None:
        """At most every ``TOP_UP_EVERY_S``: insert more rows if the pending ones run low."""
        now = time.monotonic()
        if now - self._looked < TOP_UP_EVERY_S:
            return
        self._looked = now
        pending = self.db.sql(
            "SELECT count(*) FROM workerpool_jobs WHERE state IN ('pending', 'failed')"
        )[0][0]
        if pending < self.ahead:
            self.insert(self.ahead)


class Burst:
    """One burst measurement into ``report``, on ``launcher``'s database."""

    def __init__(
        self,
        launcher: supervised.Launcher,
        report: Report,
        *,
        kills: int,
        window_s: float,
        nap_ms: float,
    ) -> None:
        self.launcher, self.db, self.report = launcher, launcher.db, report
        self.kills, self.window, self.nap_ms = kills, window_s, nap_ms
        self.step_window = recovery_window(window_s)
        self.backlog = Backlog(self.db, nap_ms, launcher.concurrency)
        self.before: float | None = None  # jobs/s, once the window before the burst is settled

    def now(self) -> datetime:
        return self.db.sql("SELECT clock_timestamp()")[0][0]

    def run(self) -> None:
        self.db.reset()
        self.backlog.insert(self.backlog.ahead)  # before the start: claimed at boot, no NOTIFY
        with self.launcher.running(1) as (supervisor,):
            started = self.first_finished(supervisor)
            self.wait_until(supervisor, started + seconds(self.window / 2 + self.window))
            first_kill, last_kill = self.burst(supervisor)
            stop = self.watch(supervisor, first_kill, last_kill)
            supervised.wait_drained(self.db, self.backlog.inserted, [supervisor])
        self.check_done()
        self.record(first_kill, last_kill, stop)

    # -- the phases ------------------------------------------------------------------------

    def first_finished(self, supervisor: supervised.Supervisor) -> datetime:
        deadline = time.monotonic() + supervised.START_TIMEOUT
        while True:
            self.backlog.top_up()
            [(first,)] = self.db.sql(
                "SELECT min(finished_at) FROM " + every_job("finished_at", "state = 'done'")
            )
            if first is not None:
                return first
            self.alive(supervisor, deadline, "the first job done")
            time.sleep(POLL_S)

    def wait_until(self, supervisor: supervised.Supervisor, moment: datetime) -> None:
        deadline = time.monotonic() + supervised.START_TIMEOUT
        while self.now() < moment:
            self.backlog.top_up()
            self.alive(supervisor, deadline, "the warm-up")
            time.sleep(POLL_S)

    def burst(self, supervisor: supervised.Supervisor) -> tuple[datetime, datetime]:
        """``kills`` SIGKILLs of the queue child: (database time of the first, of the last)."""
        killed: int | None = None
        first_kill = last_kill = None
        for _ in range(self.kills):
            pid = self.holding_child(supervisor, killed)
            last_kill = self.now()
            first_kill = first_kill or last_kill
            os.kill(pid, signal.SIGKILL)
            killed = pid
        assert first_kill is not None and last_kill is not None
        return first_kill, last_kill

    def holding_child(self, supervisor: supervised.Supervisor, killed: int | None) -> int:
        """The pid of the queue child (not ``killed``) once it holds a job it claimed half a nap
        ago or more. The child reports its first claim to the supervisor right after the claim's
        commit, before any handler starts: killed after that, it is restarted at once (a child
        killed before it claims anything would count as a failed boot). A child idle between
        two jobs is not killed: its death would cost nothing."""
        deadline = time.monotonic() + supervised.START_TIMEOUT
        held_for = seconds(self.nap_ms / 2000.0)
        while True:
            self.backlog.top_up()
            for pid in supervisor.queue_children():
                if pid != killed and self.db.sql(
                    "SELECT 1 FROM workerpool_jobs j JOIN workerpool_workers w"
                    " ON j.claimed_by = w.id WHERE w.pid = %s AND w.queue = %s"
                    " AND j.state = 'processing' AND j.claimed_at <= clock_timestamp() - %s"
                    " LIMIT 1",
                    (pid, app.QUEUE, held_for),
                ):
                    return pid
            self.alive(supervisor, deadline, "a replacement child holding a job")
            time.sleep(POLL_S)

    def watch(
        self, supervisor: supervised.Supervisor, first_kill: datetime, last_kill: datetime
    ) -> datetime:
        """Keep the backlog up until the window after the burst is over and the rate is back
        (or ``RECOVERY_LIMIT`` windows have passed): the database time the top-ups stopped."""
        limit = last_kill + seconds(RECOVERY_LIMIT * self.window)
        after = last_kill + seconds(self.window + SETTLED_S)
        deadline = time.monotonic() + RECOVERY_LIMIT * self.window + supervised.START_TIMEOUT
        while True:
            self.backlog.top_up()
            now = self.now()
            if now >= after and self.before is None:
                self.before = self.rate_before(first_kill)
            if now >= limit or (now >= after and self.recovery(last_kill, now) is not None):
                return now
            self.alive(supervisor, deadline, "the rate to come back")
            time.sleep(TOP_UP_EVERY_S)

    # -- figures -----------------------------------------------------------------------------

    def done_between(self, start: datetime, end: datetime) -> int:
        return self.db.sql(
            "SELECT count(*) FROM "
            + every_job(
                "finished_at",
                "state = 'done' AND finished_at >= %(start)s AND finished_at < %(end)s",
            ),
            {"start": start, "end": end},
        )[0][0]

    def rate_before(self, first_kill: datetime) -> float:
        return self.done_between(first_kill - seconds(self.window), first_kill) / self.window

    def recovery(self, last_kill: datetime, until: datetime) -> float | None:
        """Seconds from ``last_kill`` to the first window back within 20 % of the rate before,
        among the windows that end by ``until`` less ``SETTLED_S`` (None: not back yet)."""
        assert self.before is not None
        span = (until - last_kill).total_seconds() - SETTLED_S
        steps = math.floor(span / STEP_S)
        width = round(self.step_window / STEP_S)
        if steps < width:
            return None
        counts = [0] * steps
        for k, count in self.db.sql(
            "SELECT floor(extract(epoch FROM finished_at - %(kill)s)::float8 / %(step)s)::int"
            " AS k, count(*) FROM "
            + every_job(
                "finished_at",
                "state = 'done' AND finished_at >= %(kill)s AND finished_at < %(end)s",
            )
            + " GROUP BY k",
            {"kill": last_kill, "step": STEP_S, "end": last_kill + seconds(steps * STEP_S)},
        ):
            counts[min(k, steps - 1)] += count
        wanted = BACK_WITHIN * self.before * self.step_window
        in_window = sum(counts[:width])
        for start in range(steps - width + 1):
            if start:
                in_window += counts[start + width - 1] - counts[start - 1]
            if in_window >= wanted:
                return start * STEP_S
        return None

    def check_done(self) -> None:
        states = dict(
            self.db.sql("SELECT state, count(*) FROM " + every_job("state") + " GROUP BY state")
        )
        if states != {"done": self.backlog.inserted}:
            raise RuntimeError(
                f"burst: {self.backlog.inserted} jobs inserted, after the drain "
                f"{states}: not every job done"
            )

    def record(self, first_kill: datetime, last_kill: datetime, stop: datetime) -> None:
        before = self.before = self.rate_before(first_kill)
        after = self.done_between(last_kill, last_kill + seconds(self.window)) / self.window
        recovery = self.recovery(last_kill, stop)
        if recovery is None:
            recovery = (stop - last_kill).total_seconds()
            log.warning(
                "burst: the rate was not back within %.0f %% of %.0f jobs/s %.1f s "
                "after the last kill; recovery reported as that (a lower bound)",
                100 - BACK_WITHIN * 100,
                before,
                recovery,
            )
        [(held,)] = self.db.sql(
            "SELECT count(*) FROM "
            + every_job("errors")
            + ", jsonb_array_elements(j.errors) AS e WHERE e->>'type' = 'WorkerLost'"
        )
        self.report.add(BEFORE, before)
        self.report.add(AFTER, after)
        self.report.add(RECOVERY, recovery)
        self.report.add(HELD, held)
        log.info(
            "burst: %d kill -9s in %.2f s; %.0f jobs/s before, %.0f after (%.2fx); back "
            "within %.0f %% %.2f s after the last kill; %d jobs held; %d jobs, all done",
            self.kills,
            (last_kill - first_kill).total_seconds(),
            before,
            after,
            after / before if before else float("nan"),
            100 - BACK_WITHIN * 100,
            recovery,
            held,
            self.backlog.inserted,
        )

    # -- helpers -----------------------------------------------------------------------------

    def alive(self, supervisor: supervised.Supervisor, deadline: float, waiting_for: str) -> None:
        if supervisor.process.poll() is not None:
            raise RuntimeError(
                f"workerpool run exited with {supervisor.process.returncode} "
                f"waiting for {waiting_for}:\n{supervisor.tail()}"
            )
        if time.monotonic() > deadline:
            raise RuntimeError(f"burst: timed out waiting for {waiting_for}")


def seconds(value: float) -> timedelta:
    return timedelta(seconds=value)
