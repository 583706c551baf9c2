"""The version is written once (pyproject.toml) and the changelog follows it."""

from __future__ import annotations

import re
import tomllib

import workerpool
from tests.helpers.paths import ROOT


def test_the_version_is_pyprojects_and_the_changelog_has_a_section_for_it():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert workerpool.__version__ == declared
    changelog = (ROOT / "CHANGELOG.md").read_text()
    sections = re.findall(r"^## \[([^\]]+)\]", changelog, re.M)
    assert sections[0] == "Unreleased" and sections[1] == declared, sections
    assert '__version__ = "' not in (ROOT / "workerpool" / "__init__.py").read_text()
