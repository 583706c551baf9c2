"""`workerpool run APP:POOL`: the supervisor, and what its children and its releaser run.

This is where the layers meet: the application's pool (its registry and database URL), the
settings of the run (:mod:`workerpool.process.settings`: arguments and environment), the
runtime a child runs (:func:`workerpool.runtime.runners.build_runner`) and the release the
releaser runs (:func:`workerpool.runtime.release.release_dead_workers`), handed to the
supervisor as factories. The runtime's modules are imported here, in the parent, before its
first fork.
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

from ..client import WorkerPool
from ..process import settings as run_settings
from ..process.child import Child, RunnerFactory
from ..process.releaser import Releaser
from ..process.supervisor import Supervisor
from ..runtime.release import release_dead_workers
from ..runtime.runners import build_runner
from .logs import configure_logging
from .target import check_migrated, load_pool


def cmd_run(args: argparse.Namespace) -> int:
    return build_supervisor(args).run()


def build_supervisor(args: argparse.Namespace) -> Supervisor:
    """The supervisor `workerpool run` starts, not yet running."""
    pool, settings = load(args)
    return Supervisor(
        settings,
        child_factory=child_factory(pool, runner_factory(pool, settings)),
        releaser_factory=releaser_factory(pool, settings),
    )


def load(args: argparse.Namespace) -> tuple[WorkerPool, run_settings.RunSettings]:
    """The application's pool and the run's settings (its logging configured first)."""
    configure_logging(args.log_level, args.log_format)
    pool = load_pool(args.app)
    settings = run_settings.load(
        pool,
        args.queue,
        heartbeat_dir=args.heartbeat_dir,
        grace=args.grace,
        restart_delay=args.restart_delay,
        boot_retries=args.boot_retries,
        maintenance_interval=pool.registry.maintenance_settings.interval,
        metrics_port=args.metrics_port,
        metrics_bind=args.metrics_bind,
        processes=args.processes,
        app=args.app,
        database=pool.engines.identity(),
    )
    pool.url  # resolved once here: the embedded PostgreSQL starts before any fork
    check_migrated(pool)  # refused here: children would retry UndefinedTable forever
    pool.dispose()  # its connection closed: the forked children make their own
    return pool, settings


def runner_factory(pool: WorkerPool, settings: run_settings.RunSettings) -> RunnerFactory:
    """What a child runs: the runtime's runner on the pool's registry and URL, with this run's
    queue settings."""
    read_url = pool.engines.read_url if pool.engines.replica else None
    return functools.partial(
        build_runner,
        pool.registry,
        pool.url,
        queues=settings.queues,
        pooled=settings.pooled,
        read_url=read_url,
    )


def child_factory(pool: WorkerPool, runner: RunnerFactory) -> Any:
    """``(worker_type, *, parent_pid, orphans, close_fds) -> Child`` running ``runner``."""
    return functools.partial(Child, runner_factory=runner, after_fork=pool.engines.forget_engine)


def releaser_factory(pool: WorkerPool, settings: run_settings.RunSettings) -> Any:
    """``(worker_ids, *, parent_pid, close_fds) -> Releaser`` on the pool's URL and hooks."""
    release = functools.partial(release_dead_workers, pool.url, pooled=settings.pooled)
    return functools.partial(
        Releaser, release=release, on_dead=pool.on_dead, after_fork=pool.engines.forget_engine
    )
