"""A Worker in-process, on a thread of the test."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from workerpool import WorkerPool
from workerpool.model import exitcodes
from workerpool.runtime.worker import Worker


def on_thread(worker: Worker) -> tuple[threading.Thread, list[int]]:
    """Start ``worker.run()`` on a daemon thread; its exit code lands in the returned list."""
    code: list[int] = []
    thread = threading.Thread(target=lambda: code.append(worker.run()), daemon=True)
    thread.start()
    return thread, code


@contextmanager
def running(
    pool: WorkerPool, queue: str, *, renew_leases: bool = True, **kwargs
) -> Iterator[Worker]:
    """A Worker on ``queue`` for the block; stopped afterwards, and it must exit cleanly.
    ``renew_leases=False`` plants a fault: its leases run out while their jobs run."""
    worker = Worker(pool.registry, pool.url, queue, **kwargs)
    if not renew_leases:
        worker.leases.renewable = lambda: []  # type: ignore[method-assign]
    thread, code = on_thread(worker)
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(30)
        assert not thread.is_alive(), "worker did not stop"
    assert code == [exitcodes.OK]
