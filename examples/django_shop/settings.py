"""Django settings of the recipe: one PostgreSQL database, named by $WORKERPOOL_DATABASE_URL."""

from __future__ import annotations

import os

from sqlalchemy.engine import make_url

_url = make_url(os.environ.get("WORKERPOOL_DATABASE_URL", "postgresql://localhost/shop"))


def _libpq_list(value: str | tuple[str, ...] | None) -> str:
    """A URL's ``?host=`` (a socket directory, as the embedded server's URL has) or several of
    them (failover): libpq takes a comma-separated list, and so does Django's HOST."""
    return ",".join((value,) if isinstance(value, str) else value or ())


SECRET_KEY = "recipe-only-not-a-secret"  # a real project reads it from its vault
DEBUG = False
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]
INSTALLED_APPS = ["examples.django_shop"]
ROOT_URLCONF = "examples.django_shop.urls"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",  # psycopg 3, the driver workerpool uses too
        "NAME": _url.database,
        "USER": _url.username or "",
        "PASSWORD": _url.password or "",
        "HOST": _url.host or _libpq_list(_url.query.get("host")),
        "PORT": str(_url.port or "") or _libpq_list(_url.query.get("port")),
    }
}
