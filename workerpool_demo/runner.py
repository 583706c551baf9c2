"""`workerpool demo`: the example backend under a real supervisor, a live view, and a verdict.

1. Pick a server (``$WORKERPOOL_DATABASE_URL``, else the embedded PostgreSQL), create a fresh
   database for the demo on it (never touching any other database), migrate it, create the example
   application's tables and its existing users.
2. Start ``workerpool run workerpool_demo.app:pool`` as a real child process (own session: a
   Ctrl-C here is relayed to it once, as a drain).
3. Play a burst of web requests against the app: signups (with double clicks, invalid addresses
   and one poison message), password resets, account deletions, data exports. With
   ``--chaos``, SIGKILL a random worker process every few seconds meanwhile.
4. Show per-queue counts and throughput until the work settles, drain the supervisor (SIGTERM),
   then print a summary whose checks decide the exit code: nothing left processing, every job
   done or dead on purpose, one email per idempotency key, no half-deleted user, cleanup runs that
   never overlapped.
"""

from __future__ import annotations

import importlib
import random
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import TextIO

from sqlalchemy.engine import URL

from workerpool.process import settings
from workerpool.sql import db

from .database import demo_environment, fresh_database, shown_url
from .options import Options
from .play import Run, drain, play
from .process import DRAIN_WAIT, Supervisor
from .scenario import Backend, plan
from .summary import Check, summarise
from .view import LiveView

#: The application the demo runs under `workerpool run` (imported once the environment is set:
#: it reads its cron schedule from it).
APP = "workerpool_demo.app"


def main(options: Options, out: TextIO = sys.stdout) -> int:
    """Run the demo; returns the exit code (0: every check passed, 1: one failed, 130: Ctrl-C)."""
    options.check()
    out.write("workerpool demo: preparing a fresh database...\n")
    out.flush()
    with db.embedded_for_this_command(
        settings.database_url(), settings.embedded_dir()
    ) as stops_server:
        url = fresh_database(options.database)
        with demo_environment(url):
            app = importlib.import_module(APP)
            try:
                return Demo(options, app, url, out, stops_server).run()
            finally:
                app.pool.dispose()


class Demo:
    def __init__(
        self, options: Options, app: ModuleType, url: URL, out: TextIO, stops_server: bool = False
    ) -> None:
        self.options, self.app, self.url, self.out = options, app, url, out
        self.stops_server = stops_server  # the embedded server it started, stopped at its end
        self.rng = random.Random(options.seed)
        self.scenario = plan(self.rng, options.duration, options.users, app.POISON_NAME)

    def run(self) -> int:
        existing = self.prepare()
        log_path = Path(tempfile.gettempdir()) / f"{self.options.database}.log"
        supervisor = Supervisor(APP, self.url, log_path)
        try:
            self.say(
                f"supervisor pid {supervisor.pid} runs {APP}:pool (log: {log_path}); Ctrl-C drains"
            )
            backend = Backend(self.app, self.scenario, existing)
            view = LiveView(self.out, sorted(self.app.pool.queues), tty=self.out.isatty())
            run = play(self.options, self.app, backend, supervisor, view, self.rng)
            run.supervisor_exit = self.stop(supervisor)
        finally:
            supervisor.close()
        return self.report(backend, run)

    def prepare(self) -> list[int]:
        self.app.pool.migrate()
        self.app.create_tables(self.app.pool.engine)
        with self.app.pool.engine.begin() as conn:
            return self.app.seed_existing_users(conn, self.scenario.existing_users, self.rng)

    def stop(self, supervisor: Supervisor) -> int | None:
        if not supervisor.running():
            self.say(
                f"the supervisor exited on its own ({supervisor.process.returncode}); "
                f"its log ends with:\n{supervisor.log_tail()}"
            )
            return supervisor.process.returncode
        code = drain(supervisor, self.out)
        if code is None:
            self.say(f"the supervisor did not exit within {DRAIN_WAIT:g} s; killing it")
        return code

    def report(self, backend: Backend, run: Run) -> int:
        with self.app.pool.engine.connect() as conn:
            lines, checks = summarise(conn, self.app, self.scenario, backend, run)
        checks.append(
            Check(
                run.supervisor_exit == 0,
                f"the supervisor drained and exited with status {run.supervisor_exit}",
            )
        )
        if not run.settled and not run.interrupted:
            checks.append(
                Check(
                    False,
                    f"the work did not settle within "
                    f"{self.options.settle_timeout:g} s after the requests",
                )
            )
        self.print_summary(run, lines, checks)
        if run.interrupted:
            return 130
        return 0 if all(check.ok for check in checks) else 1

    def print_summary(self, run: Run, lines: list[str], checks: list[Check]) -> None:
        chaos = (
            f"; chaos: {len(run.kills)} worker processes killed with SIGKILL mid-run"
            if self.options.chaos
            else ""
        )
        requests = ", ".join(f"{n} {kind}" for kind, n in sorted(run.requests.items()))
        out = [
            "",
            f"workerpool demo: summary after {run.elapsed:.1f} s{chaos}",
            f"requests played: {requests}",
            "",
            *lines,
            "",
            "checks:",
            *(f"  [{'ok' if c.ok else 'FAIL'}] {c.text}" for c in checks),
            "",
            f"result: {'PASS' if all(c.ok for c in checks) else 'FAIL'}"
            + (" (interrupted)" if run.interrupted else ""),
            self.inspect_hint(),
        ]
        self.out.write("\n".join(out) + "\n")
        self.out.flush()

    def inspect_hint(self) -> str:
        if self.stops_server:
            return (
                f"the embedded PostgreSQL the demo started stops with it (its data stays in"
                f" {settings.embedded_dir()})"
            )
        shown = shown_url(self.url)
        return f"inspect the jobs: WORKERPOOL_DATABASE_URL='{shown}' workerpool status"

    def say(self, text: str) -> None:
        self.out.write(f"workerpool demo: {text}\n")
        self.out.flush()
