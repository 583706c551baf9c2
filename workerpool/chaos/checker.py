"""The checker: the whole history (producers' log, jobs table, ledger) against the guarantees.

Categories after Jepsen's total-queue checker: *lost* (an acknowledged enqueue that never ended
done, dead or cancelled), *unexpected* (an execution of a job nobody enqueued, such as a
rolled-back one), plus workerpool's own promises: no two executions of one job overlapping while
both held a valid lease (fencing), effects once, attempts and errors that agree with the ledger,
cron ticks enqueued once and never overlapping, nothing left ``processing``; every batch whose
members all ended fired its callback exactly once, from an outcome (not the sweep), never
before its last member; every stored result and every result read equals what the handler
returned; no job of a chain, graph or sequence ran before its parents ended (done, or failed
where it was told to run anyway), every dependent of a failed parent ended cancelled (or ran,
where told to), no sequence ran two jobs at once or out of order, and the maintenance sweep
never had to release a waiting job; no durable step ran again after its job recorded it
finished, and a done job recorded every one of its steps; a ``once`` job's effect, written in
the transaction that ended it, is there exactly once when it is done and never otherwise; no
parent that awaited its child (``job.wait_for_job``) finished, or had a run end ok, before
that child ended, and its result is the child's.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

TERMINAL = {"done", "dead", "cancelled"}


@dataclass
class History:
    enqueued: list[dict[str, Any]]  # the producers' log
    jobs: dict[int, dict[str, Any]]  # id → row of workerpool_jobs
    execs: list[dict[str, Any]]  # chaos_exec rows
    probes: dict[str, list[tuple[datetime, bool]]]  # exec_id → (at, valid)
    effects: dict[str, dict[str, Any]]  # key → chaos_effect row
    batches: dict[int, dict[str, Any]] = field(default_factory=dict)  # id → batches row
    callbacks: list[dict[str, Any]] = field(default_factory=list)  # chaos_callback rows
    reads: list[dict[str, Any]] = field(default_factory=list)  # the producers' result reads
    edges: list[dict[str, Any]] = field(default_factory=list)  # workerpool_job_dependencies
    step_runs: list[dict[str, Any]] = field(default_factory=list)  # chaos_step rows
    once: dict[int, int] = field(default_factory=dict)  # job id → its chaos_once rows


@dataclass
class Verdict:
    violations: dict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))
    outcomes: Counter = field(default_factory=Counter)
    notes: Counter = field(default_factory=Counter)

    def add(self, kind: str, detail: Any) -> None:
        self.violations[kind].append(detail)

    @property
    def ok(self) -> bool:
        return not any(self.violations.values())


def check(history: History) -> Verdict:
    verdict = Verdict()
    by_key = {row["key"]: row for row in history.jobs.values() if row["key"]}
    execs_by_job: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for run in history.execs:
        execs_by_job[run["job_id"]].append(run)
    _enqueues(history, by_key, execs_by_job, verdict)
    for job_id, row in history.jobs.items():
        runs = execs_by_job.get(job_id, [])
        verdict.outcomes[f"{row['task']}: {_outcome(row)}"] += 1
        _job(row, runs, history, verdict)
    _fencing(history, execs_by_job, verdict)
    _cron(history, verdict)
    _batches(history, verdict)
    _results(history, verdict)
    _workflows(history, execs_by_job, verdict)
    _steps(history, verdict)
    _once(history, verdict)
    _awaits(history, execs_by_job, verdict)
    for job_id in execs_by_job.keys() - history.jobs.keys():
        verdict.add("unexpected", job_id)
    return verdict


def _ended_by_its_run(row: dict[str, Any], runs: list[dict[str, Any]], history: History) -> bool:
    """A run of the job's last attempt ended ok. A ``once`` job ends itself with
    ``complete_in`` before its run reports to the ledger: a worker killed between that commit
    and the report leaves it done with its run started, not ended; the effect row written in
    the transaction that ended it (checked by :func:`_once`) is then the run's proof."""
    last = [r for r in runs if r["attempt"] == row["attempts"]]
    if any(r["outcome"] == "ok" for r in last):
        return True
    return row["task"] == "once" and bool(last) and history.once.get(row["id"], 0) > 0


def _outcome(row: dict[str, Any]) -> str:
    return f"dead/{row['dead_reason']}" if row["state"] == "dead" else row["state"]


def _enqueues(history: History, by_key: dict, execs_by_job: dict, verdict: Verdict) -> None:
    for entry in history.enqueued:
        row = by_key.get(entry["key"])
        verdict.notes[f"enqueue {entry['mode']}: {entry['status']}"] += 1
        if entry["status"] == "rolled_back":
            if row is not None:
                verdict.add("rolled_back_committed", entry["key"])
            # by key, not by the id seen inside the transaction: after a failover the new
            # primary's sequence may hand out again ids that were never committed
            if row is not None and row["id"] in execs_by_job:
                verdict.add("rolled_back_ran", row["id"])
            if entry["key"] in history.effects:
                verdict.add("rolled_back_effect", entry["key"])
        elif row is None:
            if entry["status"] == "ok":
                verdict.add("lost", entry["key"])
        elif row["state"] not in TERMINAL:
            verdict.add("lost", f"{row['id']} ({row['state']}, crashes {row.get('crashes')})")
        elif entry["status"] == "gave_up":
            verdict.notes["enqueue outcome unknown, found (recovered)"] += 1


def _job(
    row: dict[str, Any], runs: list[dict[str, Any]], history: History, verdict: Verdict
) -> None:
    job_id = row["id"]
    if row["state"] == "processing":
        verdict.add("left_processing", job_id)
    # a drained job gives its attempt back, so only a finished row must be at or past the ledger
    if row["state"] in TERMINAL and runs and max(r["attempt"] for r in runs) > row["attempts"]:
        verdict.add("attempts_behind_ledger", job_id)
    if row["attempts"] > row["max_attempts"]:
        verdict.add("attempts_over_max", job_id)
    if row["state"] == "done":
        if not _ended_by_its_run(row, runs, history):
            verdict.add("done_without_its_run", job_id)
        # the handler's effect key: the job's key, else its id (a batch's callback has no key)
        if row["task"] != "poison" and (row["key"] or f"job:{job_id}") not in history.effects:
            verdict.add("missing_effect", job_id)
    raised = Counter(r["attempt"] for r in runs if (r["outcome"] or "").startswith("raised:"))
    for entry in row["errors"]:
        if entry.get("type", "").endswith("Flaky"):
            if raised[entry.get("attempt")] <= 0:
                verdict.add("error_without_run", f"{job_id} attempt {entry.get('attempt')}")
            raised[entry.get("attempt")] -= 1
    if row["task"] == "poison":
        if row["state"] != "dead":
            verdict.add("poison_not_dead", job_id)
        if len(runs) > row["max_attempts"] + 1:
            verdict.add("poison_overrun", f"{job_id}: {len(runs)} runs")
    unplanned = [r for r in runs if not (r["outcome"] or "").startswith("raised:")]
    if row["task"] != "poison" and len(unplanned) > 1:
        verdict.notes["jobs run again after a fault (at-least-once)"] += 1


def lease_interval(history: History, exec_id: str) -> tuple[datetime, datetime] | None:
    """From an execution's first to its last probe that found its lease valid."""
    valid = [at for at, ok in history.probes.get(exec_id, []) if ok]
    return (min(valid), max(valid)) if valid else None


def _overlaps(runs: list[dict[str, Any]], history: History) -> list[tuple[str, str]]:
    spans = sorted(
        (span, run["exec_id"])
        for run in runs
        if (span := lease_interval(history, run["exec_id"])) is not None
    )
    found = []
    latest: tuple[datetime, str] | None = None  # the span reaching furthest so far, and whose
    for (start, end), exec_id in spans:
        if latest is not None and start <= latest[0]:
            found.append((latest[1], exec_id))
        if latest is None or end > latest[0]:
            latest = (end, exec_id)
    return found


def _fencing(history: History, execs_by_job: dict, verdict: Verdict) -> None:
    for job_id, runs in execs_by_job.items():
        for pair in _overlaps(runs, history):
            verdict.add("lease_overlap", {"job": job_id, "executions": pair})


def _cron(history: History, verdict: Verdict) -> None:
    ticks: dict[str, set[int]] = defaultdict(set)
    ok_runs: Counter = Counter()
    cron_runs = [run for run in history.execs if run["kind"] == "tick"]
    for run in cron_runs:
        ticks[run["tick"]].add(run["job_id"])
        ok_runs[run["tick"]] += run["outcome"] == "ok"
    for tick, jobs in ticks.items():
        if len(jobs) > 1:
            verdict.add("cron_tick_twice", {"tick": tick, "jobs": sorted(jobs)})
    verdict.notes["cron ticks run"] = len(ticks)
    verdict.notes["cron ticks completed more than once (re-run after a lost ack)"] = sum(
        1 for n in ok_runs.values() if n > 1
    )
    for a, b in _overlaps(cron_runs, history):
        job_a = next(r["job_id"] for r in cron_runs if r["exec_id"] == a)
        job_b = next(r["job_id"] for r in cron_runs if r["exec_id"] == b)
        if job_a != job_b:  # one job's own overlaps are reported as lease_overlap
            verdict.add("cron_overlap", {"jobs": [job_a, job_b], "executions": [a, b]})


def _batches(history: History, verdict: Verdict) -> None:
    """Each batch: finished once its members all ended, by an outcome, with one callback job
    per callback, created after its last member ended, which saw no member still live."""
    members: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in history.jobs.values():
        if row.get("batch_id") is not None:
            members[row["batch_id"]].append(row)
    for batch_id, batch in history.batches.items():
        callbacks = set(batch["callback_ids"] or [])
        own = [row for row in members.get(batch_id, []) if row["id"] not in callbacks]
        fired = [row for row in members.get(batch_id, []) if row["task"] == "batch_done"]
        ended = all(row["state"] in TERMINAL for row in own)
        verdict.notes[f"batches {'finished' if batch['finished_at'] else 'open'}"] += 1
        if batch["finished_at"] is None:
            if ended:
                verdict.add("batch_not_finished", batch_id)
            if fired:
                verdict.add("callback_before_finish", batch_id)
            continue
        if not ended:
            verdict.add(
                "batch_fired_early",
                {
                    "batch": batch_id,
                    "live": [row["id"] for row in own if row["state"] not in TERMINAL],
                },
            )
        last = max((row["finished_at"] for row in own if row["finished_at"]), default=None)
        if last is not None and batch["finished_at"] < last:
            verdict.add("batch_fired_early", {"batch": batch_id, "finished": str(last)})
        if len(fired) != 1 or {row["id"] for row in fired} != callbacks:
            verdict.add(
                "callback_count", {"batch": batch_id, "jobs": sorted(row["id"] for row in fired)}
            )
        if batch["fired_by"] == "sweep":
            verdict.add("batch_swept", batch_id)
        verdict.notes[f"batch members per finished batch: {_size(len(own))}"] += 1
    for seen in history.callbacks:
        if seen["live"]:
            verdict.add(
                "callback_saw_live_members", {"batch": seen["batch_id"], "live": seen["live"]}
            )


def _size(count: int) -> str:
    return "0 (empty)" if count == 0 else "1-9" if count < 10 else "10+"


def _results(history: History, verdict: Verdict) -> None:
    """Stored results equal what the handlers return; so does every result a producer read."""
    from .app import expected_result

    for row in history.jobs.values():
        if row["state"] != "done" or row["task"] not in ("plain", "member", "awaiting"):
            continue
        wanted = expected_result(row["task"], row["key"], row.get("payload") or {})
        if row.get("result") != wanted:
            verdict.add("wrong_result", {"job": row["id"], "stored": row.get("result")})
    for read in history.reads:
        verdict.notes[f"results read: {read['error'] or 'value'}"] += 1
        if read["error"] is None and read["value"] != expected_result(
            read["task"], read["key"], {}
        ):
            verdict.add("wrong_result_read", read)


def _workflows(history: History, execs_by_job: dict, verdict: Verdict) -> None:
    jobs = history.jobs
    first_start = {
        job_id: min(run["started_at"] for run in runs)
        for job_id, runs in execs_by_job.items()
        if runs
    }
    for edge in history.edges:
        job, parent = jobs.get(edge["job_id"]), jobs.get(edge["parent_id"])
        verdict.notes[f"dependency edges: {edge['kind']}"] += 1
        if job is None or parent is None or edge["kind"] == "await":
            continue  # an awaiting job runs first, then waits: :func:`_awaits` checks it
        started = first_start.get(job["id"])
        if started is not None and (
            parent["finished_at"] is None or started < parent["finished_at"]
        ):
            verdict.add("ran_before_parent", {"job": job["id"], "parent": parent["id"]})
        failed = parent["state"] in ("dead", "cancelled")
        if edge["kind"] == "after" and failed:
            if edge["if_failed"] == "cancel":
                verdict.notes["dependents of a failed parent: cancelled"] += 1
                if job["state"] != "cancelled" or started is not None:
                    verdict.add(
                        "dependent_not_cancelled",
                        {"job": job["id"], "state": job["state"], "parent": parent["id"]},
                    )
            elif job["state"] == "cancelled" and _cancelled_by_parent(job) == parent["id"]:
                verdict.add("dependent_not_run", {"job": job["id"], "parent": parent["id"]})
            else:
                verdict.notes["dependents of a failed parent: ran anyway"] += 1
    for row in jobs.values():
        if any(
            entry.get("type") == "DependencySweep" or entry.get("swept")
            for entry in row["errors"] or []
        ):
            verdict.add("dependency_swept", row["id"])
        if row.get("sequence") and row["state"] not in TERMINAL:
            verdict.add("sequence_job_unfinished", row["id"])
    _sequences(history, execs_by_job, first_start, verdict)


def _cancelled_by_parent(row: dict[str, Any]) -> int | None:
    last = (row["errors"] or [{}])[-1]
    return last.get("parent") if last.get("type") == "DependencyFailed" else None


def _sequences(history: History, execs_by_job: dict, first_start: dict, verdict: Verdict) -> None:
    """Each sequence: a job starts only after the one enqueued before it ended, and no two of
    its jobs held a valid lease at once."""
    lines: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in history.jobs.values():
        if row.get("sequence"):
            lines[row["sequence"]].append(row)
    for name, rows in lines.items():
        rows.sort(key=lambda r: r["id"])
        verdict.notes["sequenced jobs"] += len(rows)
        for before, after in itertools.pairwise(rows):
            started = first_start.get(after["id"])
            if started is not None and (
                before["finished_at"] is None or started < before["finished_at"]
            ):
                verdict.add(
                    "sequence_out_of_order", {"sequence": name, "jobs": [before["id"], after["id"]]}
                )
        runs = [run for row in rows for run in execs_by_job.get(row["id"], [])]
        owner = {run["exec_id"]: run["job_id"] for run in runs}
        for a, b in _overlaps(runs, history):
            if owner[a] != owner[b]:
                verdict.add("sequence_overlap", {"sequence": name, "jobs": [owner[a], owner[b]]})


def _steps(history: History, verdict: Verdict) -> None:
    """A finished step never runs again: no run of its work started after the job recorded it
    (both times on the database clock; the work is written before the step is recorded)."""
    from .app import STEPS

    runs: dict[tuple[int, str], list[datetime]] = defaultdict(list)
    for run in history.step_runs:
        runs[run["job_id"], run["step"]].append(run["at"])
    for row in history.jobs.values():
        if row["task"] != "stepped":
            continue
        stored = row.get("steps") or {}
        if row["state"] == "done" and set(stored) != set(STEPS):
            verdict.add("steps_missing", {"job": row["id"], "stored": sorted(stored)})
        for name, entry in stored.items():
            finished = datetime.fromisoformat(entry["finished_at"])
            done_at = runs.get((row["id"], name), [])
            again = [at for at in done_at if at > finished]
            if again:
                verdict.add(
                    "step_ran_twice", {"job": row["id"], "step": name, "runs": len(done_at)}
                )
            if len(done_at) > 1:
                verdict.notes["steps run again before they were recorded (a fault between)"] += 1
            verdict.notes["steps recorded"] += 1


def _once(history: History, verdict: Verdict) -> None:
    """Each ``once`` job's keyless effect (``complete_in``): once if done, else never; and its
    result is the one written with it."""
    from .app import expected_result

    for row in history.jobs.values():
        if row["task"] != "once":
            continue
        count = history.once.get(row["id"], 0)
        verdict.notes["once effects counted"] += count
        if row["state"] == "done" and count == 0:
            verdict.add("once_missing", row["id"])
        elif count > 1:
            verdict.add("once_doubled", {"job": row["id"], "effects": count})
        elif row["state"] in TERMINAL - {"done"} and count:
            verdict.add("once_without_done", {"job": row["id"], "state": row["state"]})
        if row["state"] == "done" and row.get("result") != expected_result(
            "once", row["key"], row.get("payload") or {}
        ):
            verdict.add("wrong_result", {"job": row["id"], "stored": row.get("result")})


def _awaits(history: History, execs_by_job: dict, verdict: Verdict) -> None:
    """A done ``awaiting`` job: its child (the step ``spawn``) ended before it, no run of it
    ended ok before the child ended (a run may start before: it spawned the child, which may
    end while it runs), and its result is the child's."""
    jobs = history.jobs
    for row in jobs.values():
        if row["task"] != "awaiting" or row["state"] != "done":
            continue
        child_id = ((row.get("steps") or {}).get("spawn") or {}).get("value")
        child = jobs.get(child_id) if isinstance(child_id, int) else None
        if child is None:
            verdict.add("awaited_child_missing", row["id"])
            continue
        verdict.notes["parents that awaited a child"] += 1
        ended = child["finished_at"]
        runs = [r for r in execs_by_job.get(row["id"], []) if r["outcome"] == "ok"]
        if (
            ended is None
            or row["finished_at"] <= ended
            or any(r["finished_at"] is not None and r["finished_at"] < ended for r in runs)
        ):
            verdict.add("parent_before_child", {"job": row["id"], "child": child_id})
        if row["result"] != {"got": child["result"]}:
            verdict.add("awaited_wrong_result", {"job": row["id"], "child": child_id})


def recovery_times(
    landed: list[tuple[int, str, float]], runs: list[tuple[float, float]]
) -> dict[str, list[float]]:
    """Per fault kind: seconds from each fault to the first completion of an execution that
    started after it (new work done, not a run that was already past the fault)."""
    runs = sorted(runs)  # (started, finished) of successful executions
    starts = [started for started, _ in runs]
    found: dict[str, list[float]] = defaultdict(list)
    for _, kind, at in landed:
        after = runs[bisect.bisect_right(starts, at) :]
        if after:
            found[kind].append(min(finished for _, finished in after[:200]) - at)
    return dict(found)
