"""The django extra: the Tasks API backport on every Python (Django 5.2 runs on 3.12 too), and
only below the release that renames its exceptions (workerpool.contrib.django.compat imports
them by their 0.12 names)."""

from __future__ import annotations

import tomllib

from tests.helpers.paths import ROOT


def test_the_django_extra_pins_the_backport_on_every_python():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    for extra in ("django", "dev"):
        [backport] = [r for r in extras[extra] if r.startswith("django-tasks")]
        assert ";" not in backport, f"{extra}: {backport} (no marker: Django 5.2 on 3.12 needs it)"
        assert backport.replace(" ", "").startswith("django-tasks>=0.12,<0.13"), backport
