"""A stand-in for one `workerpool run` replica, for tests written before the supervisor landed.

``python -m tests.helpers.replica APP:POOL QUEUE``: one process running the maintenance loop
(cron, sweeps, pruning) in a thread and the real worker runtime (``workerpool.worker.Worker``)
for QUEUE in the main thread. ``kill -9`` takes both down at once, as losing a host does.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

from workerpool.cli import load_pool
from workerpool.jobs import new_worker_id
from workerpool.maintenance import Maintenance, run_loop
from workerpool.worker import Worker


def main() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s [{os.getpid()}] %(levelname)s %(name)s %(message)s")
    pool = load_pool(sys.argv[1])
    maintenance = Maintenance(pool, worker_id=new_worker_id())
    threading.Thread(target=run_loop, args=(maintenance, threading.Event()), daemon=True).start()
    sys.exit(Worker(pool, sys.argv[2]).run())


if __name__ == "__main__":
    main()
