"""The supervisor's metrics exporter: ``GET /metrics`` over every process's files.

:func:`workerpool.model.metrics.enable` switches the recorder on in the parent before its first
fork, with a private directory; the children inherit it. This module serves that directory with
``prometheus_client``'s ``MultiProcessCollector`` (loaded only with ``--metrics-port``), adds the
heartbeat files' ages, and drops a dead child's live gauges.
"""

from __future__ import annotations

import logging
from typing import Any

from ..model import metrics
from ..model.errors import ConfigError
from . import heartbeat

log = logging.getLogger("workerpool.supervisor")


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

        family = GaugeMetricFamily(
            "workerpool_heartbeat_age_seconds",
            "Seconds since each heartbeat file was touched",
            labels=["worker"],
        )
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

    server, _thread = start_http_server(
        port, addr=bind, registry=registry(directory, heartbeat_dir)
    )
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

    @classmethod
    def start_for(cls, settings: Any) -> Exporter:
        """The exporter of ``workerpool run``'s settings, serving; ConfigError (one line) if its
        port cannot be listened on."""
        port, bind = settings.metrics_port, settings.metrics_bind
        exporter = cls(port, bind, str(settings.heartbeat_dir))
        try:
            exporter.start()
        except OSError as exc:
            raise ConfigError(
                f"--metrics-port {port}: cannot listen on {bind}:{port}: {exc.strerror or exc}"
            ) from None
        log.info(
            "metrics on http://%s:%d/metrics",
            bind,
            port,
            extra={"event": "metrics_serving", "port": port},
        )
        return exporter

    def start(self) -> None:
        """Create the directory, switch metrics on, listen. OSError: the port cannot be had."""
        import tempfile

        self.directory = tempfile.mkdtemp(prefix="metrics-", dir=self.parent_dir)  # mode 0700
        try:
            metrics.enable(self.directory)
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
        metrics.disable()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None
