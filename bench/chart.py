"""The soak's chart: throughput and backlog, claim latency, sizes (table, indexes, the worker
child's RSS) and dead rows over time.

matplotlib is a benchmark-only dependency (the ``dev`` extra): without it the CSV is the record
and no chart is drawn.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("workerpool.bench")


def draw(
    path: Path,
    samples: Sequence[Any],
    *,
    title: str,
    offered: float | Sequence[float] | None = None,
) -> Path | None:
    """Three panels sharing the time axis; returns the PNG's path, or None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display: render to a file
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: no chart (pip install 'workerpool[dev]')")
        return None
    t = [s.t for s in samples]
    figure, (rate, claim, table) = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    rate.plot(t, [s.done_per_s for s in samples], label="done/s")
    if isinstance(offered, (int, float)):
        rate.axhline(offered, color="tab:blue", linestyle="--", linewidth=0.8, label="offered")
    elif offered is not None:  # one rate per sample (a soak with a spike)
        rate.step(
            t,
            offered,
            where="post",
            color="tab:blue",
            linestyle="--",
            linewidth=0.8,
            label="offered",
        )
    rate.set_ylabel("jobs done per second")
    rate.legend(loc="upper left")
    backlog = rate.twinx()
    backlog.plot(t, [s.backlog for s in samples], color="tab:red", label="backlog")
    backlog.set_ylabel("backlog (jobs)", color="tab:red")
    claim.plot(t, [s.claim_p50_ms for s in samples], label="claim p50")
    claim.plot(t, [s.claim_p99_ms for s in samples], label="claim p99")
    claim.set_ylabel("claim (ms)")
    claim.legend(loc="upper left")
    table.plot(t, [s.table_mb for s in samples], label="table MiB")
    table.plot(t, [s.index_mb for s in samples], label="indexes MiB")
    table.plot(t, [s.child_rss_mb or 0 for s in samples], label="worker child RSS MiB")
    table.set_ylabel("size (MiB)")
    table.legend(loc="upper left")
    dead = table.twinx()
    dead.plot(t, [s.dead for s in samples], color="tab:gray", linestyle=":", label="dead rows")
    dead.set_ylabel("dead rows", color="tab:gray")
    table.set_xlabel("seconds")
    for axis in (rate, backlog, claim, table, dead):
        axis.set_ylim(bottom=0)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
