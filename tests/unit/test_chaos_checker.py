"""The chaos checker finds each kind of violation in a small hand-made history (and none in a
clean one): a checker that passed everything would fail here."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from workerpool.chaos.checker import TERMINAL, History, check, recovery_times
from workerpool.chaos.schedule import PROCESS_FAULTS, SERVER_FAULTS, plan

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def job(
    job_id,
    key,
    state="done",
    attempts=1,
    task="plain",
    errors=(),
    dead_reason=None,
    batch_id=None,
    finished=1.0,
    payload=None,
):
    result = (
        {"key": key}
        if task == "plain"
        else {"key": key, "n": (payload or {}).get("n")}
        if task == "member"
        else None
    )
    return {
        "id": job_id,
        "key": key,
        "task": task,
        "state": state,
        "dead_reason": dead_reason,
        "attempts": attempts,
        "max_attempts": 5,
        "errors": list(errors),
        "payload": payload or {},
        "result": result if state == "done" else None,
        "batch_id": batch_id,
        "finished_at": at(finished) if state in TERMINAL else None,
    }


def run(exec_id, job_id, attempt=1, outcome="ok", kind="plain", tick=None):
    return {
        "exec_id": exec_id,
        "job_id": job_id,
        "kind": kind,
        "attempt": attempt,
        "outcome": outcome,
        "tick": tick,
        "worker": "w",
        "started_at": at(0),
        "finished_at": at(1),
    }


def clean() -> History:
    return History(
        enqueued=[
            {"key": "k1", "task": "plain", "mode": "single", "status": "ok", "job_id": 1},
            {
                "key": "rb",
                "task": "plain",
                "mode": "rollback",
                "status": "rolled_back",
                "job_id": 9,
            },
        ],
        jobs={1: job(1, "k1", attempts=2)},
        execs=[run("a", 1, attempt=1, outcome=None), run("b", 1, attempt=2)],
        probes={
            "a": [(at(0), True), (at(3), True), (at(5), False)],
            "b": [(at(4), True), (at(6), True)],
        },
        effects={"k1": {"key": "k1"}},
    )


def test_a_clean_history_passes():
    verdict = check(clean())
    assert verdict.ok, dict(verdict.violations)
    assert verdict.notes["jobs run again after a fault (at-least-once)"] == 1


def test_two_valid_leases_at_once_is_a_fencing_violation():
    history = clean()
    history.probes["a"].append((at(4.5), True))  # a still held a valid lease after b had one
    assert list(check(history).violations) == ["lease_overlap"]


def test_lost_unexpected_and_rolled_back_runs_are_found():
    history = clean()
    history.enqueued.append(
        {"key": "k2", "task": "plain", "mode": "bulk", "status": "ok", "job_id": 2}
    )
    history.jobs[9] = job(9, "rb")  # the rolled-back job was committed after all, and ran
    history.execs.append(run("c", 9))
    history.execs.append(run("d", 8))  # a run of a job nobody enqueued
    found = check(history).violations
    assert found["lost"] == ["k2"] and found["rolled_back_ran"] == [9]
    assert found["rolled_back_committed"] == ["rb"] and found["unexpected"] == [8]


def test_a_job_left_processing_or_done_without_its_run_is_found():
    history = clean()
    history.jobs[1] = job(1, "k1", attempts=3)  # done at attempt 3: no run of attempt 3 ended ok
    history.jobs[3] = job(3, None, state="processing")
    found = check(history).violations
    assert found["done_without_its_run"] == [1] and found["left_processing"] == [3]


def test_a_once_job_killed_after_its_complete_in_is_done_by_its_run():
    history = clean()
    history.jobs[4] = job(4, "k4", task="once")
    history.jobs[4]["result"] = {"once": "k4"}
    history.effects["k4"] = {"key": "k4"}
    history.execs.append(run("e", 4, outcome=None, kind="once"))  # killed before it reported
    history.once = {4: 1}  # the effect committed with the completion
    assert check(history).ok, dict(check(history).violations)
    history.once = {}  # no effect row: nothing proves the run ended the job
    found = check(history).violations
    assert found["done_without_its_run"] == [4] and found["once_missing"] == [4]
    history.jobs[4]["task"] = "plain"  # any other job needs its run's "ok"
    history.jobs[4]["result"] = {"key": "k4"}
    assert check(history).violations["done_without_its_run"] == [4]


def test_errors_and_effects_must_agree_with_the_ledger():
    history = clean()
    history.jobs[1] = job(1, "k1", attempts=2, errors=[{"attempt": 2, "type": "Flaky"}])
    del history.effects["k1"]
    found = check(history).violations
    assert found["error_without_run"] == ["1 attempt 2"] and found["missing_effect"] == [1]


def test_cron_ticks_enqueued_twice_or_overlapping_are_found():
    history = clean()
    history.jobs[5] = job(5, "cron:tick:a", task="tick")
    history.jobs[6] = job(6, "cron:tick:b", task="tick")
    history.jobs[7] = job(7, "cron:tick:b2", task="tick")
    history.execs += [
        run("t5", 5, kind="tick", tick="a"),
        run("t6", 6, kind="tick", tick="b"),
        run("t7", 7, kind="tick", tick="b"),
    ]
    history.probes.update(
        {"t5": [(at(10), True), (at(12), True)], "t6": [(at(11), True)], "t7": [(at(20), True)]}
    )
    found = check(history).violations
    assert found["cron_tick_twice"] == [{"tick": "b", "jobs": [6, 7]}]
    assert [v["jobs"] for v in found["cron_overlap"]] == [[5, 6]]


def test_recovery_is_the_first_completion_of_work_started_after_the_fault():
    runs = [(0.0, 10.0), (1.5, 2.0), (2.5, 3.5)]
    assert recovery_times([(1, "kill_child", 1.0)], runs) == {"kill_child": [1.0]}


def test_one_seed_is_one_schedule_covering_every_kind():
    kinds = PROCESS_FAULTS + SERVER_FAULTS
    first, again = plan(5, 60, 2.0, kinds, True), plan(5, 60, 2.0, kinds, True)
    assert first == again and first != plan(6, 60, 2.0, kinds, True)
    assert {f.kind for f in first} == {*kinds, "failover"}


# -- batches and results ------------------------------------------------------------------------


def with_batch(
    finished_at=5.0, fired_by="outcome", callbacks=(20,), member_states=("done",) * 2
) -> History:
    """A clean history plus batch 1: its members (ids 10, 11...) and its callback job(s)."""
    history = clean()
    for offset, state in enumerate(member_states):
        history.jobs[10 + offset] = job(
            10 + offset,
            f"m{offset}",
            state=state,
            task="member",
            batch_id=1,
            finished=2.0 + offset,
            payload={"n": offset},
        )
        history.execs.append(run(f"x{10 + offset}", 10 + offset, kind="member"))
        history.effects[f"m{offset}"] = {"key": f"m{offset}"}
    for callback in callbacks:
        history.jobs[callback] = job(callback, None, task="batch_done", batch_id=1, finished=9)
        history.execs.append(run(f"x{callback}", callback, kind="callback"))
        history.effects[f"job:{callback}"] = {"key": f"job:{callback}"}
    history.batches[1] = {
        "id": 1,
        "key": "b",
        "outcome": "success",
        "fired_by": fired_by,
        "finished_at": at(finished_at) if finished_at is not None else None,
        "callback_ids": list(callbacks) if finished_at is not None else None,
    }
    history.callbacks.append({"batch_id": 1, "live": 0})
    return history


def test_a_batch_fired_once_after_its_last_member_passes():
    verdict = check(with_batch())
    assert verdict.ok, dict(verdict.violations)
    assert verdict.notes["batches finished"] == 1


def test_a_batch_fired_twice_or_never_is_found():
    assert list(check(with_batch(callbacks=(20, 21))).violations) == ["callback_count"]
    unfinished = with_batch(finished_at=None, callbacks=())
    assert check(unfinished).violations["batch_not_finished"] == [1]


def test_a_batch_fired_early_or_by_the_sweep_is_found():
    early = with_batch(member_states=("done", "processing"))
    assert check(early).violations["batch_fired_early"] == [{"batch": 1, "live": [11]}]
    before_last = with_batch(finished_at=2.5)  # member 11 ended at 3.0
    assert list(check(before_last).violations) == ["batch_fired_early"]
    assert check(with_batch(fired_by="sweep")).violations["batch_swept"] == [1]
    saw_live = with_batch()
    saw_live.callbacks[0]["live"] = 2
    assert list(check(saw_live).violations) == ["callback_saw_live_members"]


def test_a_wrong_stored_or_read_result_is_found():
    history = with_batch()
    history.jobs[10]["result"] = {"key": "m0", "n": 99}
    history.reads.append(
        {"key": "k1", "task": "plain", "job_id": 1, "value": {"key": "other"}, "error": None}
    )
    history.reads.append(
        {"key": "k1", "task": "plain", "job_id": 1, "value": None, "error": "ResultTimeout"}
    )
    history.reads.append(
        {"key": "k3", "task": "flaky", "job_id": 3, "value": None, "error": None}
    )  # flaky returns nothing
    found = check(history).violations
    assert found["wrong_result"] == [{"job": 10, "stored": {"key": "m0", "n": 99}}]
    assert [r["value"] for r in found["wrong_result_read"]] == [{"key": "other"}]


# -- workflows ---------------------------------------------------------------------------------


def workflow_history() -> History:
    """A chain 1 → 2 and a sequence of 3 then 4, all clean."""
    history = History(enqueued=[], jobs={}, execs=[], probes={}, effects={})
    for job_id, start, sequence in ((1, 0, None), (2, 2, None), (3, 0, "s"), (4, 2, "s")):
        row = job(job_id, None, task="node", finished=start + 1)
        row["sequence"] = sequence
        history.jobs[job_id] = row
        history.execs.append(
            {
                **run(f"e{job_id}", job_id, kind="node"),
                "started_at": at(start),
                "finished_at": at(start + 1),
            }
        )
        history.probes[f"e{job_id}"] = [(at(start), True), (at(start + 0.9), True)]
        history.effects[f"job:{job_id}"] = {"key": f"job:{job_id}"}
    history.edges = [
        {"job_id": 2, "parent_id": 1, "kind": "after", "if_failed": "cancel"},
        {"job_id": 4, "parent_id": 3, "kind": "sequence", "if_failed": "run"},
    ]
    return history


def test_a_clean_workflow_history_passes():
    verdict = check(workflow_history())
    assert verdict.ok, dict(verdict.violations)


def test_a_dependent_run_before_its_parent_ended_is_found():
    history = workflow_history()
    history.execs[1]["started_at"] = at(0.5)  # job 2 started before job 1 ended
    assert "ran_before_parent" in check(history).violations


def test_a_dependent_of_a_failed_parent_that_was_not_cancelled_is_found():
    history = workflow_history()
    history.jobs[1].update(state="dead", dead_reason="permanent", result=None)
    assert "dependent_not_cancelled" in check(history).violations


def test_a_sequence_running_two_at_once_or_out_of_order_is_found():
    history = workflow_history()
    history.execs[3]["started_at"] = at(0.5)
    history.probes["e4"] = [(at(0.5), True), (at(0.8), True)]
    violations = check(history).violations
    assert "sequence_out_of_order" in violations and "sequence_overlap" in violations


def test_a_job_the_sweep_released_is_a_violation():
    history = workflow_history()
    history.jobs[2]["errors"] = [{"type": "DependencySweep"}]
    assert "dependency_swept" in check(history).violations


def stepped_history() -> History:
    """A stepped job that died after its first step and finished on its second attempt: the
    first step's work ran once, the second's twice (its first run was never recorded)."""
    history = clean()
    steps = {
        name: {
            "kind": "step",
            "attempt": attempt,
            "started_at": at(start).isoformat(),
            "finished_at": at(start + 0.1).isoformat(),
            "value": f"{name} ok",
        }
        for name, attempt, start in (("reserve", 1, 1), ("charge", 2, 5), ("notify", 2, 6))
    }
    row = job(3, "k3", attempts=2, task="stepped")
    row.update(steps=steps, result=["reserve ok", "charge ok", "notify ok"])
    history.jobs[3] = row
    history.enqueued.append(
        {"key": "k3", "task": "stepped", "mode": "single", "status": "ok", "job_id": 3}
    )
    history.effects["k3"] = {"key": "k3"}
    history.execs += [
        run("s1", 3, attempt=1, outcome=None, kind="stepped"),
        run("s2", 3, attempt=2, kind="stepped"),
    ]
    history.step_runs = [
        {"job_id": 3, "step": "reserve", "exec_id": "s1", "at": at(1.05)},
        {"job_id": 3, "step": "charge", "exec_id": "s1", "at": at(2)},  # killed before recording
        {"job_id": 3, "step": "charge", "exec_id": "s2", "at": at(5.05)},
        {"job_id": 3, "step": "notify", "exec_id": "s2", "at": at(6.05)},
    ]
    return history


def test_steps_recorded_once_pass_and_a_step_run_again_after_it_finished_is_found():
    verdict = check(stepped_history())
    assert verdict.ok, dict(verdict.violations)
    assert verdict.notes["steps recorded"] == 3
    assert verdict.notes["steps run again before they were recorded (a fault between)"] == 1
    history = stepped_history()
    history.step_runs.append({"job_id": 3, "step": "reserve", "exec_id": "s2", "at": at(5.0)})
    found = check(history).violations
    assert list(found) == ["step_ran_twice"]
    assert found["step_ran_twice"] == [{"job": 3, "step": "reserve", "runs": 2}]


def test_a_done_stepped_job_missing_a_step_is_found():
    history = stepped_history()
    del history.jobs[3]["steps"]["notify"]
    assert list(check(history).violations) == ["steps_missing"]


def awaited(parent_finished: float, child_finished: float, run_finished: float) -> History:
    """A clean history plus a parent (20) that awaited its child (21): the parent's first run
    (suspended) and its last run (ok, from 0.2 s, which spawned its child, to
    ``run_finished``)."""
    history = clean()
    child = job(21, "k20:child", finished=child_finished)
    parent = job(20, "k20", task="awaiting", finished=parent_finished)
    parent["steps"] = {"spawn": {"value": 21}}
    parent["result"] = {"got": child["result"]}
    history.jobs.update({20: parent, 21: child})
    history.execs += [
        {**run("p1", 20, outcome="raised:Suspended", kind="awaiting"), "started_at": at(0)},
        {
            **run("p2", 20, kind="awaiting"),
            "started_at": at(0.2),
            "finished_at": at(run_finished),
        },
        {**run("c1", 21), "started_at": at(0.5)},
    ]
    history.effects.update({"k20": {"key": "k20"}, "k20:child": {"key": "k20:child"}})
    history.edges.append({"job_id": 20, "parent_id": 21, "kind": "await", "if_failed": "run"})
    return history


def test_a_parent_that_awaited_its_child_passes():
    # its last run started before the child ended (it spawned it) and ended after: fine
    verdict = check(awaited(parent_finished=3, child_finished=1, run_finished=2))
    assert verdict.ok, dict(verdict.violations)
    assert verdict.notes["parents that awaited a child"] == 1


def test_a_parent_that_finished_before_its_child_is_found():
    found = check(awaited(parent_finished=3, child_finished=4, run_finished=2)).violations
    assert found["parent_before_child"] == [{"job": 20, "child": 21}]
    # its run ended ok before the child ended
    found = check(awaited(parent_finished=3, child_finished=1.5, run_finished=1)).violations
    assert found["parent_before_child"] == [{"job": 20, "child": 21}]


def test_a_parent_with_another_result_than_its_childs_is_found():
    history = awaited(parent_finished=3, child_finished=1, run_finished=2)
    history.jobs[20]["result"] = {"got": None}
    found = check(history).violations
    assert found["awaited_wrong_result"] == [{"job": 20, "child": 21}]
