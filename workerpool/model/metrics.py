"""Prometheus metrics: every definition in one place, and the switch that turns them on.

Off unless ``workerpool run --metrics-port`` is given: then the supervisor calls :func:`enable`
before its first fork, with a private directory. ``prometheus_client``'s multiprocess mode keeps
each process's values in its own mmap files there (``counter_<pid>.db`` ...): an increment is a
write to shared memory, never a message or a database round trip. The parent serves a
``MultiProcessCollector`` over the directory, which sums the files of every process that ever
wrote one. A child that dies leaves its counter files behind, so its counts are kept; its
replacement has another pid and so other files, so nothing is counted twice. Gauges of live
processes (jobs in flight) are ``livesum``: :func:`process_died` removes a dead child's file.

Hooks call the module-level :data:`record`: a :class:`Null` recorder (every method does nothing)
until :func:`enable` swaps in a :class:`Recorder`. Children inherit the switch through the fork.
The parent's side, the HTTP exporter over the directory, is :mod:`workerpool.process.exporter`.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Mapping
from typing import Any

PREFIX = "workerpool_"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

#: ``outcome`` label values of workerpool_jobs_finished_total (a bounded set).
OUTCOMES = ("done", "retried", "dead", "snoozed", "waiting", "released", "cancelled", "lost")
#: ``cause`` label values of workerpool_child_restarts_total.
CAUSES = ("hang", "recycle", "boot_failure", "signal", "exit")

DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)
DELAY_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0)
#: ``state`` label values of workerpool_queue_depth: queued = pending or failed (not running);
#: the state ``waiting`` (held for parents, a sequence or a signal) is workerpool_blocked_jobs.
DEPTH_STATES = ("queued", "processing")
BATCH_BUCKETS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)


class Null:
    """Metrics off: every hook is a method that does nothing."""

    enabled = False

    def finished(self, queue: str, task: str, outcome: str, seconds: float | None) -> None: ...
    def claimed(self, queue: str, rows: list[Any]) -> None: ...
    def flush(self) -> None: ...
    def in_flight(self, queue: str, count: int) -> None: ...
    def woke(self, queue: str, source: str) -> None: ...
    def restarted(self, worker: str, cause: str) -> None: ...
    def depth(self, samples: Mapping[str, Mapping[str, Any]]) -> None: ...
    def bounds(self, bounds: Mapping[str, int]) -> None: ...
    def batches_finished(self, fired: list[Any], fired_by: str) -> None: ...
    def batches_open(self, count: int) -> None: ...
    def batches_opened(self, count: int) -> None: ...
    def index_rebuilt(self, index: str) -> None: ...


class Recorder(Null):
    """Metrics on: the definitions, and the hooks that update them.

    The per-job hooks (:meth:`finished`, :meth:`claimed`) run on the worker's main loop and only
    add to plain dictionaries; :meth:`flush`, at the end of each pass, writes the sums to the
    mmap files: one write per series touched instead of several per job (a multiprocess write
    takes a lock and costs microseconds, which a drain of thousands of jobs a second notices).
    """

    enabled = True

    def __init__(self) -> None:
        # registry=None: the scrape reads the files (MultiProcessCollector), and the app's own
        # default registry stays the app's.
        from prometheus_client import Counter, Gauge, Histogram

        self.jobs_finished = Counter(
            "workerpool_jobs_finished",
            "Attempts whose outcome a worker wrote, by outcome",
            ["queue", "task", "outcome"],
            registry=None,
        )
        self.handler_seconds = Histogram(
            "workerpool_handler_duration_seconds",
            "Time a handler ran (one attempt)",
            ["queue", "task"],
            buckets=DURATION_BUCKETS,
            registry=None,
        )
        self.pickup_seconds = Histogram(
            "workerpool_pickup_delay_seconds",
            "claimed_at - run_at of each claimed job",
            ["queue"],
            buckets=DELAY_BUCKETS,
            registry=None,
        )
        self.jobs_in_flight = Gauge(
            "workerpool_jobs_in_flight",
            "Jobs a worker process holds (running or buffered)",
            ["queue"],
            multiprocess_mode="livesum",
            registry=None,
        )
        self.claims = Counter(
            "workerpool_claims", "Claim statements a worker ran", ["queue"], registry=None
        )
        self.claim_batch = Histogram(
            "workerpool_claim_batch_size",
            "Rows one claim statement returned",
            ["queue"],
            buckets=BATCH_BUCKETS,
            registry=None,
        )
        self.wakeups = Counter(
            "workerpool_wakeups",
            "Times an idle claim loop woke: a notification, or its poll",
            ["queue", "source"],
            registry=None,
        )
        self.restarts = Counter(
            "workerpool_child_restarts",
            "Children the supervisor restarted, by cause",
            ["worker", "cause"],
            registry=None,
        )
        self.depth_gauge = Gauge(
            "workerpool_queue_depth",
            "Jobs per queue waiting (pending or failed) or processing, "
            "sampled by maintenance (a capped count: at most workerpool_queue_depth_cap)",
            ["queue", "state"],
            multiprocess_mode="livemostrecent",
            registry=None,
        )
        self.max_pending = Gauge(
            "workerpool_queue_max_pending",
            "A bounded queue's bound: jobs waiting to run past which an enqueue raises QueueFull",
            ["queue"],
            multiprocess_mode="livemostrecent",
            registry=None,
        )
        self.depth_cap = Gauge(
            "workerpool_queue_depth_cap",
            "The cap of the queue depth count",
            [],
            multiprocess_mode="livemostrecent",
            registry=None,
        )
        self.oldest_due = Gauge(
            "workerpool_oldest_due_age_seconds",
            "How long the oldest due job has waited",
            ["queue"],
            multiprocess_mode="livemostrecent",
            registry=None,
        )
        self.blocked = Gauge(
            "workerpool_blocked_jobs",
            "Jobs in the state waiting (for their parents or their"
            " sequence), sampled by maintenance (a capped count)",
            ["queue"],
            multiprocess_mode="livemostrecent",
            registry=None,
        )
        self.suspects = Gauge(
            "workerpool_suspects",
            "Due jobs held by a process that died (they run alone)",
            ["queue"],
            multiprocess_mode="livemostrecent",
            registry=None,
        )
        self.batches_done = Counter(
            "workerpool_batches_finished",
            "Batches finished (their callbacks enqueued), by"
            " outcome and by who finished them: a member's outcome, or the sweep (never, unless"
            " the outcome path missed one)",
            ["outcome", "fired_by"],
            registry=None,
        )
        self.batches_open_gauge = Gauge(
            "workerpool_batches_open",
            "Batches opened and not finished yet, sampled by maintenance",
            [],
            multiprocess_mode="livemostrecent",
            registry=None,
        )
        self.batches_opened_total = Counter(
            "workerpool_batches_opened",
            "Batches opened (committed), counted by maintenance as"
            " it samples: from the newest batch it saw at its first sample on",
            [],
            registry=None,
        )
        self.index_rebuilds = Counter(
            "workerpool_index_rebuilds",
            "Indexes of the jobs table the maintenance child"
            " rebuilt (REINDEX CONCURRENTLY) because they were far above their packed size",
            ["index"],
            registry=None,
        )
        self._children: dict[tuple, Any] = {}
        self._counts: dict[tuple, float] = {}  # (metric, *labels) -> increments not written
        self._observed: dict[tuple, list] = {}  # (metric, *labels) -> [per-bucket counts, sum]
        self._gauges: dict[tuple, float] = {}  # the last value written (skip a rewrite)

    def _child(self, metric: Any, labels: tuple[str, ...]) -> Any:
        """A labelled child, cached: ``labels()`` costs a few microseconds each call."""
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels) if labels else metric
        return child

    def _count(self, metric: Any, *labels: str) -> None:
        key = (metric, *labels)
        self._counts[key] = self._counts.get(key, 0) + 1

    def _buckets(self, metric: Any, bounds: tuple[float, ...], labels: tuple[str, ...]) -> list:
        """The unwritten [per-bucket counts, sum] of one labelled histogram."""
        key = (metric, *labels)
        entry = self._observed.get(key)
        if entry is None:
            entry = self._observed[key] = [[0] * (len(bounds) + 1), 0.0]
        return entry

    def _observe(self, metric: Any, bounds: tuple[float, ...], value: float, *labels: str) -> None:
        entry = self._buckets(metric, bounds, labels)
        entry[0][bisect.bisect_left(bounds, value)] += 1  # the first bucket with value <= bound
        entry[1] += value

    def finished(self, queue: str, task: str, outcome: str, seconds: float | None) -> None:
        # once per job: inlined _count and _observe (their calls cost as much as the work)
        counts, key = self._counts, (self.jobs_finished, queue, task, outcome)
        counts[key] = counts.get(key, 0) + 1
        if seconds is not None:
            entry = self._buckets(self.handler_seconds, DURATION_BUCKETS, (queue, task))
            entry[0][bisect.bisect_left(DURATION_BUCKETS, seconds)] += 1
            entry[1] += seconds

    def claimed(self, queue: str, rows: list[Any]) -> None:
        self._count(self.claims, queue)
        self._observe(self.claim_batch, BATCH_BUCKETS, len(rows), queue)
        if not rows:
            return
        # one loop with locals: a drain claims thousands of rows a second, and a call per row
        # (the generic _observe) costs more than the observation itself
        entry = self._buckets(self.pickup_seconds, DELAY_BUCKETS, (queue,))
        buckets, total, where = entry[0], 0.0, bisect.bisect_left
        for row in rows:
            delay = (row.claimed_at - row.run_at).total_seconds()
            if delay > 0.0:
                buckets[where(DELAY_BUCKETS, delay)] += 1
                total += delay
            else:
                buckets[0] += 1
        entry[1] += total

    def flush(self) -> None:
        """Write what the main loop counted since the last flush (the main loop's)."""
        counts, self._counts = self._counts, {}
        for (metric, *labels), amount in counts.items():
            self._child(metric, tuple(labels)).inc(amount)
        observed, self._observed = self._observed, {}
        for (metric, *labels), (buckets, total) in observed.items():
            add_observations(self._child(metric, tuple(labels)), buckets, total)

    def _set(self, metric: Any, value: float, *labels: str) -> None:
        key = (id(metric), *labels)
        if self._gauges.get(key) != value:
            self._gauges[key] = value
            self._child(metric, labels).set(value)

    def in_flight(self, queue: str, count: int) -> None:
        self._set(self.jobs_in_flight, count, queue)

    def woke(self, queue: str, source: str) -> None:
        """At most one a poll interval, or one a notification (the LISTEN thread): direct."""
        self._child(self.wakeups, (queue, source)).inc()

    def restarted(self, worker: str, cause: str) -> None:
        self._child(self.restarts, (worker, cause)).inc()

    def depth(self, samples: Mapping[str, Mapping[str, Any]]) -> None:
        """``samples``: queue -> {queued, processing, blocked, suspects, oldest_due, cap}."""
        for queue, sample in samples.items():
            for state in DEPTH_STATES:
                self._child(self.depth_gauge, (queue, state)).set(sample[state])
            self._child(self.suspects, (queue,)).set(sample["suspects"])
            self._child(self.blocked, (queue,)).set(sample.get("blocked", 0))
            self._child(self.oldest_due, (queue,)).set(sample["oldest_due"])
            self.depth_cap.set(sample["cap"])

    def bounds(self, bounds: Mapping[str, int]) -> None:
        """Each bounded queue's ``max_pending`` (sampled with the depth: compare the two)."""
        for queue, max_pending in bounds.items():
            self._child(self.max_pending, (queue,)).set(max_pending)

    def batches_finished(self, fired: list[Any], fired_by: str) -> None:
        """Batches this process finished (after the commit): counted, written at the flush."""
        for batch in fired:
            self._count(self.batches_done, batch.outcome, fired_by)

    def batches_open(self, count: int) -> None:
        self.batches_open_gauge.set(count)

    def batches_opened(self, count: int) -> None:
        if count:
            self.batches_opened_total.inc(count)

    def index_rebuilt(self, index: str) -> None:
        """From the table keeper's thread: written at once (a rebuild is rare)."""
        self.index_rebuilds.labels(index).inc()


def add_observations(histogram: Any, buckets: list[int], total: float) -> None:
    """Add many observations to a labelled histogram at once: per-bucket counts and their sum.

    prometheus_client has no public call for this; a histogram child keeps one value per bucket
    (not cumulative) and one for the sum, which ``observe`` increments one at a time.
    tests/unit/test_metrics.py checks that this scrapes exactly like ``observe``.
    """
    for index, count in enumerate(buckets):
        if count:
            histogram._buckets[index].inc(count)
    histogram._sum.inc(total)


#: What the hooks call (see the module's docstring).
record: Null = Null()


def enable(directory: str) -> Recorder:
    """Metrics on for this process and the children it forks from now on.

    ``directory``: private (0700), empty, for this run only. Must run before the first fork.
    """
    global record
    os.environ[MULTIPROC_ENV] = directory
    from prometheus_client import values

    if values.ValueClass is values.MutexValue:
        # prometheus_client picks its value class at import, from the environment: an app that
        # imported it before the variable was set would otherwise keep in-memory values.
        values.ValueClass = values.MultiProcessValue()
    record = Recorder()
    return record


def disable() -> None:
    global record
    record = Null()
