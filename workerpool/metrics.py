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
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

PREFIX = "workerpool_"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

#: ``outcome`` label values of workerpool_jobs_finished_total (a bounded set).
OUTCOMES = ("done", "failed", "dead", "snoozed", "released", "cancelled", "lost")
#: ``cause`` label values of workerpool_child_restarts_total.
CAUSES = ("hang", "recycle", "boot_failure", "signal", "exit")

DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)
DELAY_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0)
#: ``state`` label values of workerpool_queue_depth: waiting = pending or failed (not running).
DEPTH_STATES = ("waiting", "processing")
BATCH_BUCKETS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)


class Null:
    """Metrics off: every hook is a method that does nothing."""

    enabled = False

    def finished(self, queue: str, task: str, outcome: str) -> None: ...
    def handler_duration(self, queue: str, task: str, seconds: float) -> None: ...
    def claimed(self, queue: str, rows: list[Any]) -> None: ...
    def in_flight(self, queue: str, count: int) -> None: ...
    def woke(self, queue: str, source: str) -> None: ...
    def restarted(self, worker: str, cause: str) -> None: ...
    def depth(self, samples: Mapping[str, Mapping[str, Any]]) -> None: ...


class Recorder(Null):
    """Metrics on: the definitions, and the hooks that update them."""

    enabled = True

    def __init__(self) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self.jobs_finished = Counter(
            "workerpool_jobs_finished", "Attempts whose outcome a worker wrote, by outcome",
            ["queue", "task", "outcome"])
        self.handler_seconds = Histogram(
            "workerpool_handler_duration_seconds", "Time a handler ran (one attempt)",
            ["queue", "task"], buckets=DURATION_BUCKETS)
        self.pickup_seconds = Histogram(
            "workerpool_pickup_delay_seconds", "claimed_at - run_at of each claimed job",
            ["queue"], buckets=DELAY_BUCKETS)
        self.jobs_in_flight = Gauge(
            "workerpool_jobs_in_flight", "Jobs a worker process holds (running or buffered)",
            ["queue"], multiprocess_mode="livesum")
        self.claims = Counter("workerpool_claims", "Claim statements a worker ran", ["queue"])
        self.claim_batch = Histogram(
            "workerpool_claim_batch_size", "Rows one claim statement returned", ["queue"],
            buckets=BATCH_BUCKETS)
        self.wakeups = Counter(
            "workerpool_wakeups", "Times an idle claim loop woke: a notification, or its poll",
            ["queue", "source"])
        self.restarts = Counter(
            "workerpool_child_restarts", "Children the supervisor restarted, by cause",
            ["worker", "cause"])
        self.depth_gauge = Gauge(
            "workerpool_queue_depth", "Jobs per queue waiting (pending or failed) or processing, "
            "sampled by maintenance (a capped count: at most workerpool_queue_depth_cap)",
            ["queue", "state"], multiprocess_mode="livemostrecent")
        self.depth_cap = Gauge(
            "workerpool_queue_depth_cap", "The cap of the queue depth count", [],
            multiprocess_mode="livemostrecent")
        self.oldest_due = Gauge(
            "workerpool_oldest_due_age_seconds", "How long the oldest due job has waited",
            ["queue"], multiprocess_mode="livemostrecent")
        self.suspects = Gauge(
            "workerpool_suspects", "Due jobs held by a process that died (they run alone)",
            ["queue"], multiprocess_mode="livemostrecent")
        self._children: dict[tuple, Any] = {}

    def _child(self, metric: Any, *labels: str) -> Any:
        """A labelled child, cached: ``labels()`` costs a few microseconds each call."""
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def finished(self, queue: str, task: str, outcome: str) -> None:
        self._child(self.jobs_finished, queue, task, outcome).inc()

    def handler_duration(self, queue: str, task: str, seconds: float) -> None:
        self._child(self.handler_seconds, queue, task).observe(seconds)

    def claimed(self, queue: str, rows: list[Any]) -> None:
        self._child(self.claims, queue).inc()
        self._child(self.claim_batch, queue).observe(len(rows))
        pickup = self._child(self.pickup_seconds, queue)
        for row in rows:
            pickup.observe(max(0.0, (row.claimed_at - row.run_at).total_seconds()))

    def in_flight(self, queue: str, count: int) -> None:
        self._child(self.jobs_in_flight, queue).set(count)

    def woke(self, queue: str, source: str) -> None:
        self._child(self.wakeups, queue, source).inc()

    def restarted(self, worker: str, cause: str) -> None:
        self._child(self.restarts, worker, cause).inc()

    def depth(self, samples: Mapping[str, Mapping[str, Any]]) -> None:
        """``samples``: queue -> {waiting, processing, suspects, oldest_due, cap}."""
        for queue, sample in samples.items():
            for state in DEPTH_STATES:
                self._child(self.depth_gauge, queue, state).set(sample[state])
            self._child(self.suspects, queue).set(sample["suspects"])
            self._child(self.oldest_due, queue).set(sample["oldest_due"])
            self.depth_cap.set(sample["cap"])


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


def process_died(pid: int, directory: str) -> None:
    """A child is gone: drop its live gauges (its counters stay, so no count is lost)."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid, directory)


def registry(directory: str, heartbeat_dir: str | None = None) -> Any:
    """A registry that reads every process's files in ``directory`` when scraped, and the
    heartbeat files' ages in ``heartbeat_dir``."""
    from prometheus_client import CollectorRegistry, multiprocess

    collected = CollectorRegistry()
    multiprocess.MultiProcessCollector(collected, path=directory)
    if heartbeat_dir is not None:
        collected.register(HeartbeatAges(heartbeat_dir))
    return collected


class HeartbeatAges:
    """``workerpool_heartbeat_age_seconds{worker}``: what ``workerpool healthcheck`` reads,
    computed at scrape time from the files' mtimes (a child that stops ticking ages here)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def collect(self) -> Any:
        from pathlib import Path

        from prometheus_client.core import GaugeMetricFamily

        from . import heartbeat

        family = GaugeMetricFamily("workerpool_heartbeat_age_seconds",
                                   "Seconds since each heartbeat file was touched",
                                   labels=["worker"])
        directory = Path(self.directory)
        for worker in heartbeat.list_workers(directory):
            try:
                family.add_metric([worker], heartbeat.age(heartbeat.path_for(directory, worker)))
            except FileNotFoundError:
                continue
        yield family


def serve(port: int, bind: str, directory: str, heartbeat_dir: str | None = None) -> Any:
    """Listen now (an error here is the caller's: a taken port); serve from a daemon thread.

    Returns the server; ``server.shutdown()`` stops it. The thread only reads the files in
    ``directory``: it holds no database connection and takes no lock the main loop holds.
    """
    from prometheus_client import start_http_server

    server, _thread = start_http_server(port, addr=bind,
                                        registry=registry(directory, heartbeat_dir))
    return server


class Exporter:
    """The supervisor's side: the private directory, the HTTP server, dead children's files.

    Why a thread in a single-threaded parent: the server thread (and the one per request of
    prometheus_client's threading server) only reads the mmap files; the main loop never waits
    for it and shares no lock with it, so a slow or stuck scrape cannot delay a reap, a
    heartbeat or a drain. It exists only with ``--metrics-port``.
    """

    def __init__(self, port: int, bind: str, parent_dir: str) -> None:
        self.port, self.bind, self.parent_dir = port, bind, parent_dir
        self.directory: str | None = None
        self.server: Any = None

    def start(self) -> None:
        """Create the directory, switch metrics on, listen. OSError: the port cannot be had."""
        import tempfile

        self.directory = tempfile.mkdtemp(prefix="metrics-", dir=self.parent_dir)  # mode 0700
        try:
            enable(self.directory)
            self.server = serve(self.port, self.bind, self.directory, self.parent_dir)
        except BaseException:
            self.close()
            raise

    def fds(self) -> tuple[int, ...]:
        """The listening socket: a forked child must close it."""
        return (self.server.fileno(),) if self.server is not None else ()

    def child_exited(self, pid: int) -> None:
        if self.directory is not None:
            process_died(pid, self.directory)

    def close(self) -> None:
        import shutil

        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        disable()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None
