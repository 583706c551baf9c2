"""``manage.py test`` on a project whose tasks go to workerpool: ``TEST_RUNNER =
"workerpool.contrib.django.testing.DiscoverRunner"``.

Django's runner makes empty test databases: this one migrates workerpool's tables into the test
database of each workerpool backend's ``DATABASE`` once Django has made them, and closes the
backends' pools before Django drops them (PostgreSQL refuses to drop a database a connection is
open on). A backend with ``URL`` names a database of its own, which the run leaves alone.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.test.runner import DiscoverRunner as DjangoDiscoverRunner

from .backend import WorkerpoolBackend, dispose_pools
from .compat import task_backends


class DiscoverRunner(DjangoDiscoverRunner):
    def setup_databases(self, **kwargs: Any) -> Any:
        old_config = super().setup_databases(**kwargs)
        for backend in workerpool_backends():
            made_before = backend.__dict__.pop("pool", None)  # it names the real database
            if made_before is not None:
                made_before.dispose()
            backend.pool.migrate()
        return old_config

    def teardown_databases(self, old_config: Any, **kwargs: Any) -> None:
        dispose_pools()
        super().teardown_databases(old_config, **kwargs)


def workerpool_backends() -> list[WorkerpoolBackend]:
    """The configured workerpool backends whose jobs live in a Django database."""
    backends = (task_backends[alias] for alias in getattr(settings, "TASKS", {}))
    return [b for b in backends if isinstance(b, WorkerpoolBackend) and not b.options.get("URL")]


__all__ = ["DiscoverRunner", "workerpool_backends"]
