"""Results and batches: what a batch member costs against a plain job, how soon a batch's
callback runs once its last member has ended, and how long ``pool.result`` takes.

- **Members against plain jobs** (issue 26's target: under 10 % more per member): the same
  ``members`` no-op jobs enqueued with ``enqueue_many`` (one transaction, ``COPY``) and drained
  by one ``workerpool run`` child, once as plain jobs and once as the members of one batch,
  interleaved (which goes first alternates per repeat). Enqueue: rows per second of the
  enqueuing call. Drain: members per second from the rows' own timestamps (first claim to last
  completion, database clock), the callback left out.
- **Callback delay**: ``BATCHES`` batches of ``members / 50`` members run one after another by
  one idle child; each delay is the callback's ``claimed_at`` minus its last member's
  ``finished_at`` (the start of the transaction that inserted the callback), database clock.
  That is the pickup of a job inserted by an outcome: against the pickup floor
  (``pickup_notify_p50_ms``, the ``pickup`` section).
- **pool.result**: for a job already done (one read), and for a job enqueued into an idle child
  and waited for at once (the enqueue, the pickup, the run, the outcome and the wake-up of the
  waiter), each against the monotonic time taken just before the call.
"""

from __future__ import annotations

import logging
import time

from workerpool import WorkerPool

from .app import noop
from .database import every_job
from .report import Report, Target, percentile
from .supervised import Launcher, p50_p90_p99, wait_drained

log = logging.getLogger("workerpool.bench")

# Per repeat, at the full size (10,000 members); a smaller run (--quick) scales them down with
# its member count, to a floor of 5.
BATCHES = 20  # batches timed for the callback delay
RESULT_WAITS = 30  # jobs waited for with pool.result
PLAIN = "batch_plain_drain_jobs_per_s"
PLAIN_ENQUEUE = "batch_plain_enqueue_rows_per_s"
MEMBERS = "batch_member_drain_jobs_per_s"
MEMBERS_ENQUEUE = "batch_member_enqueue_rows_per_s"


def declare(report: Report, members: int) -> None:
    report.declare(
        PLAIN_ENQUEUE,
        "rows/s",
        note=f"enqueue_many of {members:,} plain no-op jobs, one transaction",
    )
    report.declare(
        MEMBERS_ENQUEUE,
        "rows/s",
        ratio_to=PLAIN_ENQUEUE,
        target=Target(">=", 0.9, on_ratio=True),
        note=f"the same {members:,} jobs as one batch's members (+ its row)",
    )
    report.declare(PLAIN, "jobs/s", note=f"{members:,} plain no-op jobs, 1 worker child")
    report.declare(
        MEMBERS,
        "jobs/s",
        ratio_to=PLAIN,
        target=Target(">=", 0.9, on_ratio=True),
        note=f"{members:,} members of one batch (lock and check per outcome flush)",
    )
    for p in (50, 99):
        report.declare(
            f"batch_callback_delay_p{p}_ms",
            "ms",
            note="callback claimed_at - last member finished_at (database clock);"
            " floor: pickup_notify",
        )
        report.declare(
            f"result_wait_p{p}_ms",
            "ms",
            note="enqueue + pool.result of a no-op into an idle child; floor: pickup"
            " + one outcome flush",
        )
    report.declare("result_done_p50_ms", "ms", note="pool.result of a job already done")


def measure(
    report: Report, launcher: Launcher, pool: WorkerPool, members: int, repeat: int
) -> None:
    order = [False, True] if repeat % 2 == 0 else [True, False]
    for batched in order:
        enqueue_rate, drain_rate = _drain(launcher, pool, members, batched=batched)
        report.add(MEMBERS_ENQUEUE if batched else PLAIN_ENQUEUE, enqueue_rate)
        report.add(MEMBERS if batched else PLAIN, drain_rate)
        log.info(
            "%s: enqueue %.0f rows/s, drain %.0f jobs/s",
            "members" if batched else "plain",
            enqueue_rate,
            drain_rate,
        )
    batches, result_waits = (max(5, min(n, n * members // 10_000)) for n in (BATCHES, RESULT_WAITS))
    delays = _callback_delays(launcher, pool, max(2, members // 50), batches)
    waits, done = _result_latencies(launcher, pool, result_waits)
    for p in (50, 99):
        report.add(f"batch_callback_delay_p{p}_ms", percentile(delays, p))
        report.add(f"result_wait_p{p}_ms", percentile(waits, p))
    report.add("result_done_p50_ms", percentile(done, 50))
    log.info(
        "callback delay p50/p90/p99 %s ms; result wait %s ms",
        [round(v, 1) for v in p50_p90_p99(delays)],
        [round(v, 1) for v in p50_p90_p99(waits)],
    )


def _drain(
    launcher: Launcher, pool: WorkerPool, members: int, *, batched: bool
) -> tuple[float, float]:
    bench_db = launcher.db
    bench_db.reset()
    items = [(noop.__name__, {"i": i}) for i in range(members)]
    with launcher.running(1) as supervisors:
        began = time.perf_counter()
        with pool.engine.begin() as conn:
            if batched:
                with pool.batch(on_complete=noop.__name__, conn=conn) as batch:
                    batch.enqueue_many(items)
            else:
                pool.enqueue_many(items, conn=conn)
        enqueue_rate = members / (time.perf_counter() - began)
        wait_drained(bench_db, members, supervisors)
    done, seconds = bench_db.sql(
        "SELECT count(*), extract(epoch FROM max(finished_at) - min(claimed_at))::float8"
        " FROM " + every_job("finished_at, claimed_at", "state = 'done' AND payload ? 'i'")
    )[0]
    if done != members:
        raise RuntimeError(f"{done} of {members} {'members' if batched else 'jobs'} done")
    return enqueue_rate, members / seconds if seconds else float("inf")


def _callback_delays(launcher: Launcher, pool: WorkerPool, size: int, batches: int) -> list[float]:
    launcher.db.reset()
    with launcher.running(1) as supervisors:
        for number in range(batches):
            with pool.batch(on_complete=noop.__name__, payload={"batch": number}) as batch:
                batch.enqueue_many([(noop.__name__, {"i": i}) for i in range(size)])
            wait_drained(launcher.db, size + 1, supervisors)
    # now() on both sides (a transaction's start): the last member's outcome transaction may
    # claim the callback it inserted itself (a worker writes outcomes and claims in one), which
    # is a delay of 0
    return [
        row[0]
        for row in launcher.db.sql(
            "SELECT extract(epoch FROM c.claimed_at - max(m.finished_at))::float8 * 1000"
            " FROM workerpool_batches b JOIN "
            + every_job("id, claimed_at, payload", alias="c")
            + " ON c.id = b.callback_ids[1] JOIN "
            + every_job("id, batch_id, finished_at", alias="m")
            + " ON m.batch_id = b.id AND m.id <> c.id"
            " WHERE b.finished_at IS NOT NULL AND c.payload ? 'batch' GROUP BY b.id, c.claimed_at"
        )
    ]


def _result_latencies(
    launcher: Launcher, pool: WorkerPool, result_waits: int
) -> tuple[list[float], list[float]]:
    launcher.db.reset()
    waits: list[float] = []
    done: list[float] = []
    with launcher.running(1):
        for number in range(result_waits + 3):  # the first three warm the connections up
            began = time.perf_counter()
            job_id = pool.enqueue(noop.__name__, {"wait": number})
            pool.result(job_id, timeout=30)
            ended = time.perf_counter()
            pool.result(job_id, timeout=0)
            again = time.perf_counter()
            if number >= 3:
                waits.append((ended - began) * 1000.0)
                done.append((again - ended) * 1000.0)
    return waits, done


__all__ = ["declare", "measure"]
