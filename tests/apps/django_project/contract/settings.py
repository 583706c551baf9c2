"""Settings of the contract run: the project's database; no apps (Django's tests/tasks need
none); no TASKS (each of Django's tests overrides it); workerpool's test runner."""

from __future__ import annotations

from ..settings import DATABASES, DEFAULT_AUTO_FIELD, SECRET_KEY, USE_TZ

INSTALLED_APPS: list[str] = []
TEST_RUNNER = "tests.apps.django_project.contract.runner.ContractRunner"

__all__ = ["DATABASES", "DEFAULT_AUTO_FIELD", "INSTALLED_APPS", "SECRET_KEY", "USE_TZ"]
