"""A URL variable set but blank is refused with one line: it is not the same as unset (which
means the embedded PostgreSQL, or reading the primary)."""

from __future__ import annotations

import pytest

from tests.helpers.cli import run_cli


@pytest.mark.parametrize("variable", ["WORKERPOOL_DATABASE_URL", "WORKERPOOL_READ_URL"])
@pytest.mark.parametrize("blank", ["", "  "])
def test_a_blank_url_variable_is_refused_before_anything_starts(db_url, tmp_path, variable,
                                                                blank):
    result = run_cli("status", url=db_url, cwd=tmp_path, extra_env={variable: blank})
    assert result.returncode != 0
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and f"{variable} is set but empty" in line, line
    assert not (tmp_path / ".workerpool").exists()  # no embedded server was started
