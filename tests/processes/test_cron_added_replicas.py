"""A schedule added at run time on a running cluster of two `workerpool run` replicas (no
restart, no deploy): it fires once per tick across both, and stops once removed.

The app is ``tests/apps/cron_added.py`` (no cron declared): each run writes its schedule's name
and tick to a ledger. A second added schedule, a marker, proves the schedulers kept running
after the removal.
"""

from __future__ import annotations

import pytest

from tests.apps import cron_added as app_module
from tests.helpers.processes import kill_all, start_supervisor
from tests.helpers.waiting import wait_until

SETTLE = 90.0  # a liveness bound for a loaded machine, not a timing claim
EVERY_SECOND = "* * * * * *"

APP = app_module  # the app the shared app fixture builds (conftest)
APP_TABLES = (app_module.LEDGER,)  # made by the app fixture

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture
def cluster(db_url, tmp_path):
    running = []
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            running.append(start_supervisor("tests.apps.cron_added:pool", db_url, tmp_path / name))
        for sup in running:
            sup.wait_running("q", "@maintenance")
        yield running
    finally:
        kill_all(running)


def ticks(sql, name: str) -> int:
    return sql("SELECT count(DISTINCT tick) FROM cron_ledger WHERE name = %s", name)[0][0]


def test_an_added_schedule_fires_once_per_tick_across_replicas_and_stops_when_removed(
    app, sql, cluster
):
    app.cron_add("digest", EVERY_SECOND, task="digest", payload={"ledger": "digest"})
    wait_until(lambda: ticks(sql, "digest") >= 5, SETTLE, message="five ticks of digest")
    app.cron_remove("digest")
    last = sql("SELECT max(id) FROM workerpool_jobs")[0][0]
    app.cron_add("marker", EVERY_SECOND, task="digest", payload={"ledger": "marker"})
    # both schedulers went on passing after the removal: the marker fired several ticks
    wait_until(lambda: ticks(sql, "marker") >= 3, SETTLE, message="three ticks of the marker")
    assert sql(
        "SELECT count(*) FROM workerpool_jobs WHERE id > %s AND key LIKE 'cron:digest:%%'", last
    ) == [(0,)]
    twice = sql("SELECT name, tick, count(*) FROM cron_ledger GROUP BY 1, 2 HAVING count(*) > 1")
    assert twice == []  # once per tick across the two replicas
    keys = sql("SELECT count(*), count(DISTINCT key) FROM workerpool_jobs")
    assert keys[0][0] == keys[0][1]
