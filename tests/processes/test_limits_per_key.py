"""Per-key limit 1, 20 keys x 50 jobs: keys run in parallel, each key strictly one at a time."""

from __future__ import annotations

import itertools
from collections import defaultdict

from tests.apps import limits
from tests.helpers.waiting import wait_until

KEYS = 20
PER_KEY = 50


def test_each_key_runs_serially_while_keys_run_in_parallel(replicas, sql):
    app = limits.build(replicas.env["WORKERPOOL_DATABASE_URL"])
    # key by key: a claim in plain claim order would meet one key's 50 rows first
    app.enqueue_many(
        [("serial", {"account": key, "n": n}) for key in range(KEYS) for n in range(PER_KEY)]
    )
    app.dispose()
    for _ in range(2):
        replicas.start("--queue", "keyed")
    wait_until(
        lambda: (
            sql("SELECT count(*) FROM workerpool_jobs WHERE state = 'done'")[0][0] == KEYS * PER_KEY
        ),
        timeout=90,
        message="every job done",
    )

    runs = sql("SELECT key, started_at, ended_at FROM limits_ledger ORDER BY started_at")
    assert len(runs) == KEYS * PER_KEY
    by_key = defaultdict(list)
    for key, start, end in runs:
        by_key[key].append((start, end))
    assert len(by_key) == KEYS
    for key, spans in by_key.items():
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end, f"two jobs of {key} overlapped"
    # more than one key running at some instant (from the handlers' own times)
    busiest = max(sum(1 for _, s, e in runs if s <= start < e) for _, start, _ in runs)
    print(f"at most {busiest} keys at once")
    assert busiest > 1
