"""The modules one claimed job passes through, in order, from its claim to its outcome write.

    python scripts/job_path.py postgresql://postgres@127.0.0.1:5432/postgres

Creates a scratch database on that server, runs one job through a real ``Worker`` on a thread,
and records (on every thread) the workerpool module of each Python call from the claim
statement's function to the return of the outcome write; prints them in the order each first
appears. The loop's own bookkeeping between the two (lease renewal, pause checks) shows too.
"""

from __future__ import annotations

import secrets
import sys
import threading
import time
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from workerpool import WorkerPool
from workerpool.migrate import upgrade
from workerpool.runtime.worker import Worker

CLAIM = ("workerpool.sql.claim", "claim")
OUTCOME = ("workerpool.sql.results", "complete_settling")  # the completing write


def trace(pool: WorkerPool) -> list[str]:
    worker = Worker(pool.registry, pool.url, "q")
    seen: list[str] = []
    state = {"on": False, "off": False}
    lock = threading.Lock()

    def profile(frame: Any, event: str, arg: Any) -> None:
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("workerpool"):
            return
        where = (module, frame.f_code.co_name)
        with lock:
            state["on"] = state["on"] or (event == "call" and where == CLAIM)
            if state["on"] and not state["off"] and event == "call" and module not in seen:
                seen.append(module)
            if state["on"] and event == "return" and where == OUTCOME:
                state["off"] = True

    pool.enqueue("work", {})
    threading.setprofile(profile)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not state["off"] and time.monotonic() < deadline:
        time.sleep(0.05)
    worker.stop()
    thread.join(10)
    threading.setprofile(None)
    return seen


def main(server_url: str) -> None:
    server = make_url(server_url).set(drivername="postgresql+psycopg")
    name = f"job_path_{secrets.token_hex(4)}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        url = server.set(database=name)
        upgrade(url)
        pool = WorkerPool(url)
        pool.queue("q", poll_interval=0.05)
        pool.task(lambda job: None, queue="q", name="work")
        print(" -> ".join(trace(pool)))
        pool.dispose()
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main(sys.argv[1])
