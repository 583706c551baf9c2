"""Run one Worker as a process: the tests' stand-in for a supervisor child.

``python -m tests.apps.worker_runner APP:POOL QUEUE [ORPHAN_ID ...]`` prints ``worker <id>`` first,
``tick`` after every pass that reached the database, ``exit <code>`` last, then exits with the
worker's exit code through a normal interpreter exit (so a handler thread that never returns
must not be able to keep the process alive). SIGTERM drains.
"""

from __future__ import annotations

import importlib
import logging
import signal
import sys

from workerpool.process.settings import queue_settings
from workerpool.runtime import worker as worker_module


def main(argv: list[str]) -> int:
    target, queue, *orphans = argv
    module_name, _, attribute = target.partition(":")
    pool = getattr(importlib.import_module(module_name), attribute)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    spec = queue_settings(pool)[queue]  # with the environment's overrides, as `workerpool run`
    worker = worker_module.Worker(
        pool.registry,
        pool.url,
        queue,
        spec=spec,
        orphans=tuple(orphans),
        pooled=pool.engines.pooled,
        on_tick=lambda: print("tick", flush=True),
    )
    signal.signal(signal.SIGTERM, lambda signum, frame: worker.stop())
    print(f"worker {worker.id}", flush=True)
    code = worker.run()
    print(f"exit {code}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
