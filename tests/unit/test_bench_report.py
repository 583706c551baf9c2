"""The bench's report: a figure's ratio to its reference, and to a second one (no database)."""

from __future__ import annotations

import json

from bench.report import Report, Target


def report_with_two_floors() -> Report:
    report = Report()
    report.declare("ceiling_jobs_per_s", "jobs/s")
    report.declare("lean_floor_jobs_per_s", "jobs/s", ratio_to="ceiling_jobs_per_s")
    report.declare(
        "drain_1child_jobs_per_s",
        "jobs/s",
        ratio_to="ceiling_jobs_per_s",
        also_to="lean_floor_jobs_per_s",
        target=Target(">=", 0.7, on_ratio=True),
    )
    for name, value in (
        ("ceiling_jobs_per_s", 20_000),
        ("lean_floor_jobs_per_s", 25_000),
        ("drain_1child_jobs_per_s", 10_000),
    ):
        report.add(name, value)
    return report


def test_a_second_reference_prints_its_ratio_beside_the_first():
    found = {d["name"]: d for d in map(json.loads, report_with_two_floors().json_lines())}
    drain = found["drain_1child_jobs_per_s"]
    assert (drain["ratio"], drain["ratio_to"]) == (0.5, "ceiling_jobs_per_s")
    assert (drain["also_ratio"], drain["also_ratio_to"]) == (0.4, "lean_floor_jobs_per_s")
    assert drain["met"] is False  # the target stays on the first ratio
    assert "also_ratio" not in found["lean_floor_jobs_per_s"]  # only where there is one


def test_the_table_shows_both_ratios_in_one_cell():
    table = report_with_two_floors().table()
    row = next(line for line in table.splitlines() if "drain_1child" in line)
    assert "0.50x ceiling_jobs; 0.40x lean_floor_jobs" in row
