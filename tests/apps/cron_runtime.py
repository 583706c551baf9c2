"""An application with a one-second cron for the run-time cron tests, and a dashboard of it
whose user resolver reads a ``who`` cookie (alice: admin, bob: read-only, else nobody).

``workerpool run tests.apps.cron_runtime:pool`` runs it; ``uvicorn
tests.apps.cron_runtime:dashboard`` serves the dashboard.
"""

from __future__ import annotations

from workerpool import Job, WorkerPool

USERS = {"alice": "admin", "bob": "read_only"}


def build(url: object = None) -> WorkerPool:
    pool = WorkerPool(url)  # default: $WORKERPOOL_DATABASE_URL
    pool.queue("cron", poll_interval=0.1, drain_timeout=1)
    pool.maintenance(interval=0.3)

    @pool.cron("* * * * * *", queue="cron")
    def beat(job: Job) -> None:
        pass

    @pool.cron("0 3 * * *", queue="cron")
    def nightly(job: Job) -> None:
        pass

    return pool


def who(request: object) -> tuple[str, str] | None:
    name = request.cookies.get("who")  # type: ignore[attr-defined]
    return (name, USERS[name]) if name in USERS else None


pool = build()


def __getattr__(name: str) -> object:
    if name == "dashboard":  # built on demand: only the dashboard's test needs Starlette
        from workerpool.web import app

        return app(pool, user=who, token=None)
    raise AttributeError(name)
