"""The run's result as one table (faults, jobs, violations, recovery times) and as JSON."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from .runner import Options, Result
from .schedule import Fault

SHOWN_IDS = 10  # ids listed per violation kind in the table (the JSON has them all)


def schedule_text(schedule: list[Fault]) -> str:
    lines = [f"fault schedule ({len(schedule)} faults):"]
    lines += [f"  {fault.describe()}" for fault in schedule]
    return "\n".join(lines)


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


def table(options: Options, result: Result) -> str:
    verdict = result.verdict
    landed = Counter(item.fault.kind for item in result.injector.landed if not item.error)
    failed = Counter(item.fault.kind for item in result.injector.landed if item.error)
    rows = [
        f"workerpool.chaos: seed {options.seed}, {options.duration:g}s of faults, "
        f"{result.elapsed:.0f}s in all, on {result.target}",
        "phases ended at: " + ", ".join(f"{k} {v:.1f}s" for k, v in result.phases.items()),
        "",
        f"{'fault':<24}{'injected':>9}{'failed':>8}   recovery s (min / median / max)",
    ]
    for kind in sorted(set(landed) | set(failed)):
        rows.append(
            f"{kind:<24}{landed[kind]:>9}{failed[kind]:>8}   "
            f"{spread(result.recovery.get(kind, []))}"
        )
    rows += ["", f"{'jobs by outcome':<40}{'count':>8}"]
    rows += [f"{name:<40}{count:>8}" for name, count in sorted(verdict.outcomes.items())]
    rows += ["", f"{'history':<64}{'count':>8}"]
    rows += [f"{name:<64}{count:>8}" for name, count in sorted(verdict.notes.items())]
    rows += ["", "violations:" + ("" if not verdict.ok else " none")]
    for kind, found in sorted(verdict.violations.items()):
        if found:
            shown = ", ".join(str(item) for item in found[:SHOWN_IDS])
            more = f" (+{len(found) - SHOWN_IDS} more)" if len(found) > SHOWN_IDS else ""
            rows.append(f"  {kind}: {len(found)}: {shown}{more}")
    if options.failover == "async":
        rows.append(
            "(asynchronous standby: the commits of its last 2 s of lag are lost on "
            "purpose, see docs/chaos.md)"
        )
    rows.append("result: " + ("PASS" if verdict.ok else "FAIL"))
    return "\n".join(rows)


def as_json(options: Options, result: Result) -> dict[str, Any]:
    return {
        "seed": options.seed,
        "duration": options.duration,
        "target": result.target,
        "elapsed": result.elapsed,
        "phases": result.phases,
        "failover": options.failover,
        "schedule": [vars(f) for f in result.schedule],
        "faults": [
            {
                "seq": i.fault.seq,
                "kind": i.fault.kind,
                "at": i.at,
                "target": i.target,
                "error": i.error,
            }
            for i in result.injector.landed
        ],
        "recovery_seconds": result.recovery,
        "outcomes": dict(result.verdict.outcomes),
        "history": dict(result.verdict.notes),
        "violations": {k: v for k, v in result.verdict.violations.items() if v},
        "supervisor_exits": result.fleet.exit_codes,
        "ok": result.verdict.ok,
    }


def write_json(path: Path, options: Options, result: Result) -> None:
    path.write_text(json.dumps(as_json(options, result), indent=2, default=str) + "\n")
