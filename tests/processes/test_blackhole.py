"""A connection that goes silent in the middle of a query, under `workerpool run`.

No iptables here, and the loopback is shared: the children reach PostgreSQL through a small TCP
proxy instead, which can stop forwarding on the connections it holds while it keeps them open
and keeps reading. Nothing then ever answers a query in flight, yet the kernel still
acknowledges every byte and every keepalive, so neither ``tcp_user_timeout`` nor the keepalives
can notice. The worker's loop stays blocked in its read. What must save the job is the
heartbeat: the loop stops ticking, the supervisor kills the child after ``hang_timeout``, and the
replacement releases the dead child's claim so the job runs again.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.engine import URL

from tests.helpers.db import job_row
from tests.helpers.waiting import wait_until
from workerpool.chaos.proxy import BlackholeProxy


def _target(db_url: URL) -> tuple[str, int] | str:
    socket_dir = str(db_url.query.get("host", ""))
    if db_url.host is None and socket_dir.startswith("/"):  # the embedded server: a unix socket
        return f"{socket_dir}/.s.PGSQL.{db_url.port or 5432}"
    return (db_url.host or "127.0.0.1", db_url.port or 5432)


@pytest.fixture
def proxy(db_url: URL) -> Iterator[BlackholeProxy]:
    running = BlackholeProxy(_target(db_url))
    yield running
    running.close()


def test_a_connection_silent_mid_query_costs_a_child_never_the_job(start, app, sql, db_url, proxy):
    through_proxy = URL.create(
        "postgresql+psycopg",
        username=db_url.username,
        password=db_url.password,
        host="127.0.0.1",
        port=proxy.port,
        database=db_url.database,
    )
    sup = start(
        env={"WORKERPOOL_DATABASE_URL": through_proxy.render_as_string(hide_password=False)}
    )
    sup.wait_running("slow")
    victim = sup.child_pid("slow")
    job = app.enqueue("steps", {"n": 20, "step": 0.1})  # enqueued directly, not through it
    wait_until(
        lambda: (job_row(sql, job)["checkpoint"] or {}).get("done", 0) >= 2,
        15,
        message="job running through the proxy",
    )

    assert proxy.silence() >= 2  # at least the slow child's loop and its listener

    wait_until(
        lambda: sup.events("hang_detected", worker="slow", pid=str(victim)),
        20,
        message=f"the silenced slow child detected as hung\n{sup.log()[-3000:]}",
    )
    wait_until(
        lambda: job_row(sql, job)["state"] == "done",
        30,
        message=f"job done by a replacement\n{sup.log()[-3000:]}",
    )
    row = job_row(sql, job)
    assert row["attempts"] == 2, row
    assert [e["type"] for e in row["errors"]] == ["WorkerLost"], row["errors"]
    assert row["checkpoint"]["resumed_from"] >= 2  # the second attempt resumed, not restarted
    assert sup.events("child_exited", pid=str(victim))[0].fields["status"] == "signal:SIGKILL"
