"""The handler threads' hand-off: every call gets a thread while one is free, in order, and
shutdown lets each thread go."""

from __future__ import annotations

import threading

from tests.helpers.waiting import wait_until
from workerpool.runtime.worker.executor import HandlerThreads


def started(size: int) -> HandlerThreads:
    threads = HandlerThreads(size, "t")
    threads.start()
    return threads


def test_a_batch_submitted_at_once_runs_on_as_many_threads_as_it_has_calls():
    # each call blocks until all of them run at the same time: a call left waiting while a
    # thread sleeps would break the barrier
    size = 20
    threads = started(size)
    barrier = threading.Barrier(size, timeout=10)
    names: set[str] = set()
    done = threading.Semaphore(0)

    def call():
        barrier.wait()
        names.add(threading.current_thread().name)
        done.release()

    for _ in range(size):
        threads.submit(call)
    for _ in range(size):
        assert done.acquire(timeout=10), f"only {len(names)} calls ran together"
    assert len(names) == size
    threads.shutdown()


def test_calls_submitted_one_by_one_while_others_block_each_get_a_thread():
    size = 5
    threads = started(size)
    release = threading.Event()
    running = threading.Semaphore(0)

    def blocked():
        running.release()
        release.wait(10)

    for n in range(size):
        threads.submit(blocked)
        assert running.acquire(timeout=10), f"call {n} never started"
    assert threads.waiting() == 0
    threads.submit(lambda: None)
    assert threads.waiting() == 1  # every thread is busy: it waits, in the buffer
    release.set()
    wait_until(lambda: threads.waiting() == 0, 10, message="the buffered call taken")
    threads.shutdown()


def test_calls_waiting_for_a_thread_start_in_submission_order():
    threads = started(1)
    gate = threading.Event()
    order: list[int] = []
    threads.submit(lambda: gate.wait(10))
    for n in range(50):
        threads.submit(lambda n=n: order.append(n))
    gate.set()
    wait_until(lambda: len(order) == 50, 10, message="fifty calls run")
    assert order == list(range(50))  # the prefetch buffer is FIFO
    threads.shutdown()


def test_shutdown_ends_every_thread():
    threads = started(3)
    threads.submit(lambda: None)
    threads.shutdown()
    wait_until(
        lambda: not any(t.is_alive() for t in threads._threads), 10, message="every thread ended"
    )
