"""A stand-in for one `workerpool run` replica, for tests written before the supervisor landed.

``python -m tests.helpers.replica APP:POOL QUEUE``: one process running the maintenance loop
(cron, sweeps, pruning) in a thread and an inline worker for QUEUE in the main thread, both
registered in ``workerpool_workers``. ``kill -9`` takes both down at once, as losing a host does.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading

from workerpool import queries, testing
from workerpool.cli import load_pool
from workerpool.jobs import new_worker_id
from workerpool.maintenance import Maintenance, run_loop


def work(pool, queue: str, stop: threading.Event) -> None:
    worker = new_worker_id()
    with pool.engine.begin() as conn:
        queries.register_worker(conn, worker, host=socket.gethostname(), pid=os.getpid(),
                                queue=queue, tasks=pool.task_versions(queue))
    while not stop.is_set():
        rows = testing.claim(pool, queue, worker, limit=1)
        if rows:
            testing.run_claimed(pool, rows[0], worker)
        with pool.engine.begin() as conn:
            queries.beat_worker(conn, worker)
        if not rows:
            stop.wait(pool.queue_spec(queue).poll_interval)


def main() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s [{os.getpid()}] %(levelname)s %(name)s %(message)s")
    pool = load_pool(sys.argv[1])
    stop = threading.Event()
    maintenance = Maintenance(pool, worker_id=new_worker_id())
    threading.Thread(target=run_loop, args=(maintenance, stop), daemon=True).start()
    work(pool, sys.argv[2], stop)


if __name__ == "__main__":
    main()
