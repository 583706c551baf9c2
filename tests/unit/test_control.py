"""The operator's requests without a database: the listener's control payloads, the handler's
view of a cancel."""

from __future__ import annotations

import threading

import pytest

from workerpool import Cancelled, Job, WorkerPool
from workerpool.runtime.worker.listener import Listener


def listener() -> tuple[Listener, list, threading.Event]:
    seen: list = []
    wake = threading.Event()
    pool = WorkerPool("postgresql://unused/x")
    made = Listener(
        pool.url,
        "email",
        wake,
        worker_id="host:1:ab",
        on_cancel=lambda ids: seen.append(("cancel", ids)),
        on_pause=lambda: seen.append(("pause",)),
    )
    return made, seen, wake


@pytest.mark.parametrize(
    "payload, expected, woken",
    [
        ("cancel host:1:ab 4,5", [("cancel", [4, 5])], True),
        ("cancel host:2:cd 4", [], False),  # another worker's job
        ("pause email", [("pause",)], True),
        ("resume email", [("pause",)], True),
        ("pause sms", [], False),
        ("bogus", [], False),
    ],
)
def test_control_payloads_reach_only_their_worker(payload, expected, woken):
    made, seen, wake = listener()
    made._control(payload)
    assert seen == expected and wake.is_set() is woken


def job() -> Job:
    return Job(id=1, queue="q", task="t", payload={}, payload_version=1, attempt=1, max_attempts=1)


def test_job_cancelled_is_an_event_and_a_bool_and_checkpoint_raises_once_set():
    it = job()
    assert not it.cancelled and not it.cancelled.wait(0)
    it.checkpoint()  # no data, not cancelled: only a check, nothing saved
    it.cancelled.set()
    assert it.cancelled and it.cancelled.wait(0)
    with pytest.raises(Cancelled, match="job 1 was cancelled"):
        it.checkpoint()
    with pytest.raises(Cancelled):
        it.checkpoint({"step": 2})  # before anything is saved
