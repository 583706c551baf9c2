"""``manage.py test`` on a project whose tasks go to workerpool: ``TEST_RUNNER =
"workerpool.contrib.django.testing.DiscoverRunner"``.

Django's runner makes empty test databases: this one migrates workerpool's tables into the test
database of each workerpool backend's ``DATABASE`` as Django migrates it (``post_migrate``), so
that ``--parallel``'s clones of it have them too, and again once all are made (a database no app
migrates). It closes the backends' pools before Django drops the databases (PostgreSQL refuses
to drop a database a connection is open on). A backend with ``URL`` names a database of its own,
which the run leaves alone.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models.signals import post_migrate
from django.test.runner import DiscoverRunner as DjangoDiscoverRunner

from .backend import WorkerpoolBackend, dispose_pools
from .compat import task_backends

_HOOK = "workerpool.contrib.django.testing"


class DiscoverRunner(DjangoDiscoverRunner):
    def setup_databases(self, **kwargs: Any) -> Any:
        migrated: set[str] = set()

        def migrate_jobs_tables(using: str = "default", **signal: Any) -> None:
            if using not in migrated:  # sent once per app
                migrated.add(using)
                migrate(using)

        post_migrate.connect(migrate_jobs_tables, dispatch_uid=_HOOK, weak=False)
        try:
            old_config = super().setup_databases(**kwargs)
        finally:
            post_migrate.disconnect(dispatch_uid=_HOOK)
        for alias in {backend.database for backend in workerpool_backends()} - migrated:
            migrate(alias)
        return old_config

    def teardown_databases(self, old_config: Any, **kwargs: Any) -> None:
        dispose_pools()
        super().teardown_databases(old_config, **kwargs)


def migrate(alias: str) -> None:
    """workerpool's tables in the test database of ``alias``; every pool on it closed after (a
    database is cloned only with no connection open on it), and each backend's next pool made
    from the settings then current (a ``--parallel`` worker's clone)."""
    for backend in workerpool_backends():
        if backend.database != alias:
            continue
        made_before = backend.__dict__.pop("pool", None)  # it may name the real database
        if made_before is not None:
            made_before.dispose()
        pool = backend.make_pool()
        try:
            pool.migrate()
        finally:
            pool.dispose()


def workerpool_backends() -> list[WorkerpoolBackend]:
    """The configured workerpool backends whose jobs live in a Django database."""
    backends = (task_backends[alias] for alias in getattr(settings, "TASKS", {}))
    return [b for b in backends if isinstance(b, WorkerpoolBackend) and not b.options.get("URL")]


__all__ = ["DiscoverRunner", "migrate", "workerpool_backends"]
