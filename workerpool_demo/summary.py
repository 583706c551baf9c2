"""The demo's summary: what happened to every job, and the checks that decide the exit code.

The checks read the database, not the demo's own bookkeeping: nothing left processing, every job
done or dead on purpose, one welcome job per user, one email per idempotency key, no half-deleted
user, cron runs that never overlapped.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from workerpool import sql as queries
from workerpool.model.states import DeadReason, JobState

from .scenario import Backend, Scenario

if TYPE_CHECKING:
    from .play import Run


@dataclass(frozen=True)
class Check:
    ok: bool
    text: str


def summarise(
    conn: Connection, app: ModuleType, scenario: Scenario, backend: Backend, run: Run
) -> tuple[list[str], list[Check]]:
    jobs = queries.job_outcomes(conn)
    lines = queue_table(jobs, run) + dead_letter_lines(jobs) + error_lines(conn)
    checks = [
        check_nothing_processing(jobs),
        check_every_job_finished(conn, jobs, app, scenario, run),
        check_one_job_per_signup(jobs, backend),
        check_one_email_per_key(conn, jobs, app),
        check_no_half_deleted_user(conn, jobs, app),
        check_no_finished_step_ran_again(conn, app),
        check_exports_approved_and_delivered(conn, app),
        check_cleanup_never_overlapped(jobs, app),
    ]
    return lines, checks


# -- what happened ------------------------------------------------------------------------------


def queue_table(jobs: list[Any], run: Run) -> list[str]:
    by_queue: dict[str, list[Any]] = defaultdict(list)
    for job in jobs:
        by_queue[job.queue].append(job)
    head = (
        f"{'queue':<15}{'jobs':>7}{'done':>7}{'dead':>7}{'other':>7}{'claims':>8}"
        f"{'retried':>9}{'peak jobs/s':>13}"
    )
    lines = [head]
    for queue, rows in sorted(by_queue.items()):
        states = Counter(job.state for job in rows)
        claims = sum(job.attempts for job in rows)
        retried = sum(1 for job in rows if job.attempts > 1)
        done, dead = states[JobState.DONE], states[JobState.DEAD]
        other = len(rows) - done - dead
        lines.append(
            f"{queue:<15}{len(rows):>7}{done:>7}{dead:>7}{other:>7}"
            f"{claims:>8}{retried:>9}{run.peak_rate.get(queue, 0.0):>13.1f}"
        )
    return lines


def dead_letter_lines(jobs: list[Any]) -> list[str]:
    dead = [job for job in jobs if job.state == JobState.DEAD]
    lines = [f"dead-letter queue: {len(dead)} jobs (workerpool dead list / retry)"]
    for job in dead:
        lines.append(
            f"  #{job.id:<6} {job.task:<20} {job.key or '':<16} {job.dead_reason:<10} "
            f"after {job.attempts} of {job.max_attempts} attempts"
        )
    return lines


def error_lines(conn: Connection) -> list[str]:
    rows = queries.count_errors_by_type(conn)
    if not rows:
        return ["error history: empty"]
    by_queue: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        by_queue[row.queue].append(f"{row.type} x{row.count}")
    return ["error history (each failed or interrupted attempt is kept on its job):"] + [
        f"  {queue}: {', '.join(entries)}" for queue, entries in sorted(by_queue.items())
    ]


# -- the checks ---------------------------------------------------------------------------------


def check_nothing_processing(jobs: list[Any]) -> Check:
    stuck = [job.id for job in jobs if job.state == JobState.PROCESSING]
    return Check(not stuck, f"nothing left processing{_ids(stuck)}")


def expected_dead(conn: Connection, app: ModuleType, scenario: Scenario) -> dict[str, str]:
    """Idempotency key -> dead_reason for the jobs the scenario meant to kill."""
    expected: dict[str, str] = {}
    emails = app.user_ids_by_email(conn)
    for email in scenario.invalid_emails:
        if email in emails:
            expected[f"welcome:{emails[email]}"] = DeadReason.PERMANENT
    if scenario.poison_email in emails:
        expected[f"welcome:{emails[scenario.poison_email]}"] = DeadReason.ABANDONED
    return expected


def check_every_job_finished(
    conn: Connection, jobs: list[Any], app: ModuleType, scenario: Scenario, run: Run
) -> Check:
    expected = expected_dead(conn, app, scenario)
    cron_tasks = set(app.pool.crons)
    waiting = (JobState.PENDING, JobState.FAILED)
    wrong, unfinished = [], []
    for job in jobs:
        if job.state == JobState.DONE and job.key not in expected:
            continue
        if job.state == JobState.DEAD and expected.get(job.key) == job.dead_reason:
            continue
        if job.state in waiting and (run.interrupted or job.task in cron_tasks):
            unfinished.append(job.id)
            continue
        wrong.append(f"#{job.id} {job.task} {job.state}/{job.dead_reason or '-'}")
    text = f"every job done, or dead on purpose ({dead_on_purpose(jobs, expected)})"
    if unfinished:
        text += f"; {len(unfinished)} waiting for the next start or tick"
    if wrong:
        text += ": NOT " + ", ".join(wrong[:10])
    return Check(not wrong, text)


def dead_on_purpose(jobs: list[Any], expected: dict[str, str]) -> str:
    rejected = sum(
        1
        for job in jobs
        if job.state == JobState.DEAD
        and job.dead_reason == DeadReason.PERMANENT
        and expected.get(job.key) == DeadReason.PERMANENT
    )
    poison = [job for job in jobs if expected.get(job.key) == DeadReason.ABANDONED]
    if not poison:
        fate = "the poison message never arrived"
    elif poison[0].state == JobState.DEAD:
        fate = f"the poison message dead/abandoned after {poison[0].attempts} claims"
    else:
        fate = f"the poison message still {poison[0].state} after {poison[0].attempts} claims"
    return f"{rejected} invalid addresses dead/permanent, {fate}"


def check_one_job_per_signup(jobs: list[Any], backend: Backend) -> Check:
    welcome = Counter(job.key for job in jobs if job.task == "send_welcome")
    users = len(set(backend.signups.values()))
    doubled = [key for key, n in welcome.items() if n > 1]
    ok = not doubled and len(welcome) == users
    return Check(
        ok,
        f"one welcome job per user: {backend.counts['signup']} signup requests "
        f"(double clicks included) -> {users} users -> {len(welcome)} welcome jobs",
    )


def check_one_email_per_key(conn: Connection, jobs: list[Any], app: ModuleType) -> Check:
    delivered = Counter(app.delivered_keys(conn))
    replays = app.replayed_requests(conn)
    twice = [key for key, n in delivered.items() if n > 1]
    email_done = {job.key for job in jobs if job.queue == "email" and job.state == JobState.DONE}
    missing = sorted(key for key in email_done if key not in delivered)
    ok = not twice and not missing
    text = (
        f"one email per idempotency key: {sum(delivered.values())} delivered for "
        f"{len(delivered)} keys; {replays} repeated requests (a job re-run after its worker "
        f"died) answered from the provider's idempotency cache"
    )
    if twice:
        text += f"; DELIVERED TWICE: {', '.join(twice[:10])}"
    if missing:
        text += f"; done but never delivered: {', '.join(missing[:10])}"
    return Check(ok, text)


def check_no_half_deleted_user(conn: Connection, jobs: list[Any], app: ModuleType) -> Check:
    deletions = [job for job in jobs if job.task == "delete_user"]
    half, in_progress = [], 0
    for job in deletions:
        user_id = int(job.key.removeprefix("delete:"))
        left = {store: n for store, n in app.remaining_rows(conn, user_id).items() if n}
        if job.state == JobState.DONE and left:
            half.append(f"user {user_id}: {left}")
        elif job.state != JobState.DONE:
            in_progress += 1
    resumed = app.resumed_deletions(conn)
    text = (
        f"no half-deleted user: {len(deletions) - in_progress} deletions complete in every "
        f"store; {resumed} resumed at their first unfinished step instead of starting over"
    )
    if in_progress:
        text += f"; {in_progress} in progress, resuming at their next step on the next start"
    if half:
        text += "; HALF DELETED: " + "; ".join(half[:5])
    return Check(not half, text)


def check_no_finished_step_ran_again(conn: Connection, app: ModuleType) -> Check:
    again = app.steps_run_again(conn)
    text = "no finished step ran again (deletions and exports replay what they stored)"
    if again:
        text += ": RAN AGAIN " + ", ".join(again[:10])
    return Check(not again, text)


def check_exports_approved_and_delivered(conn: Connection, app: ModuleType) -> Check:
    report = app.export_report(conn)
    ok = report["delivered"] == report["done"] and report["done"] > 0
    text = (
        f"data exports: {report['done']} delivered once each after a sleep and an approval"
        f" signal ({report['waited']} waited for it, holding no worker;"
        f" {report['done'] - report['waited']} found it already sent)"
    )
    if report["unfinished"]:
        text += f"; {report['unfinished']} not finished"
    if report["delivered"] != report["done"]:
        text += f"; {report['delivered']} DELIVERIES for {report['done']} done exports"
    return Check(ok, text)


def check_cleanup_never_overlapped(jobs: list[Any], app: ModuleType) -> Check:
    """Each cron run is one job: its last claim and its finish bound the run (database clock)."""
    cron_tasks = set(app.pool.crons)
    runs = sorted(
        (job for job in jobs if job.task in cron_tasks and job.state == JobState.DONE),
        key=lambda job: job.claimed_at,
    )
    overlaps = [
        f"#{a.id}/#{b.id}" for a, b in itertools.pairwise(runs) if b.claimed_at < a.finished_at
    ]
    removed: Counter[str] = Counter()
    for job in runs:
        removed.update((job.checkpoint or {}).get("done", {}))
    swept = ", ".join(f"{n} {table}" for table, n in sorted(removed.items())) or "nothing"
    if not runs:
        return Check(False, "session cleanup never ran")
    if overlaps:
        return Check(False, f"session cleanup runs OVERLAPPED: {', '.join(overlaps[:5])}")
    return Check(
        True,
        f"session cleanup ran {len(runs)} times, never overlapping; "
        f"removed {swept} (expired or past retention)",
    )


def _ids(ids: list[int]) -> str:
    return f": {', '.join(f'#{i}' for i in ids[:10])}" if ids else ""
