"""Settings of the test project: one PostgreSQL database, named by $WORKERPOOL_DATABASE_URL.

``$DJANGO_PROJECT_DB_NAME`` names another database on that server: the project's tests start
``workerpool run`` on the test database Django's runner made.
"""

from __future__ import annotations

import importlib.util
import os

from sqlalchemy.engine import make_url

_url = make_url(os.environ.get("WORKERPOOL_DATABASE_URL", "postgresql://localhost/project"))


def _libpq_list(value: str | tuple[str, ...] | None) -> str:
    """A URL's ``?host=`` (the embedded server's socket directory) as Django's HOST takes it."""
    return ",".join((value,) if isinstance(value, str) else value or ())


SECRET_KEY = "test-project-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost"]
# Before Django 6 the Tasks API is the django-tasks backport, an app of its own.
_BACKPORT = ["django_tasks"] if importlib.util.find_spec("django.tasks") is None else []
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    *_BACKPORT,
    "workerpool.contrib.django",
    "tests.apps.django_project",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
ROOT_URLCONF = "tests.apps.django_project.urls"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("DJANGO_PROJECT_DB_NAME") or _url.database,
        "USER": _url.username or "",
        "PASSWORD": _url.password or "",
        "HOST": _url.host or _libpq_list(_url.query.get("host")),
        "PORT": str(_url.port or "") or _libpq_list(_url.query.get("port")),
    }
}
# A second database: the "other" task backend's jobs live there.
DATABASES["jobs"] = {**DATABASES["default"], "NAME": f"{DATABASES['default']['NAME']}_jobs"}
# Django's log lines (a task started, finished) in the worker's output.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {  # the backport's logger is django_tasks
        name: {"handlers": ["stderr"], "level": "INFO"} for name in ("django.tasks", "django_tasks")
    },
}
# workerpool's tables in the test databases, the pools closed before Django drops them.
TEST_RUNNER = "workerpool.contrib.django.testing.DiscoverRunner"
TASKS = {
    "default": {
        "BACKEND": "workerpool.contrib.django.WorkerpoolBackend",
        "QUEUES": ["default", "emails"],
        # One attempt: a task that raises is FAILED at once, as the tests read it.
        "OPTIONS": {"MAX_ATTEMPTS": 1},
    }
}
# Two more backends, for the tests: one on the second database, with a queue of its own, and
# one with Django's "any queue" (QUEUES: []), written at once.
_WORKERPOOL = "workerpool.contrib.django.WorkerpoolBackend"
TASKS["other"] = {
    "BACKEND": _WORKERPOOL,
    "QUEUES": ["default", "reports"],
    "OPTIONS": {"DATABASE": "jobs", "MAX_ATTEMPTS": 1},
}
TASKS["anyqueue"] = {
    "BACKEND": _WORKERPOOL,
    "QUEUES": [],
    "OPTIONS": {"MAX_ATTEMPTS": 1, "ENQUEUE_ON_COMMIT": False},
}
