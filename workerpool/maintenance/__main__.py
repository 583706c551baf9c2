"""``python -m workerpool.maintenance APP:POOL``: the maintenance loop in the foreground.

For deployments without ``workerpool run``. SIGTERM or SIGINT stops it after the current pass;
it leaves the workers registry and exits 0.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence

from ..cli.target import AppLoadError, load_pool
from ..model import exitcodes
from ..model.errors import ConfigError
from ..model.job import new_worker_id
from ..process.settings import queue_settings
from ..runtime.maintenance.duties import Maintenance
from ..runtime.maintenance.loop import MaintenanceLoop

log = logging.getLogger("workerpool.maintenance")

STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workerpool.maintenance")
    parser.add_argument("app", metavar="APP:POOL")
    parser.add_argument("--interval", type=float, default=None, help="seconds between passes")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        pool = load_pool(args.app)
        maintenance = Maintenance(
            pool.registry,
            pool.engine,
            worker_id=new_worker_id(),
            interval=args.interval,
            queues=queue_settings(pool),
            pooled=pool.engines.pooled,
        )
    except (AppLoadError, ConfigError) as exc:
        print(f"workerpool maintenance: {exc}", file=sys.stderr)
        return exitcodes.FAILURE
    loop = MaintenanceLoop(maintenance)
    # Blocked here before the watcher starts (threads inherit the mask): no handler ever runs,
    # the watcher takes each stop signal synchronously and stops the loop outside any handler.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    threading.Thread(target=_stop_on_signal, args=(loop,), name="signals", daemon=True).start()
    try:
        return loop.run()
    except Exception:
        log.exception("maintenance pass failed", extra={"event": "maintenance_failed"})
        return exitcodes.FAILURE


def _stop_on_signal(loop: MaintenanceLoop) -> None:
    while True:
        signum = signal.sigwait(STOP_SIGNALS)
        log.info("stopping on %s", signal.Signals(signum).name, extra={"event": "maintenance_stop"})
        loop.stop()


if __name__ == "__main__":
    sys.exit(main())
