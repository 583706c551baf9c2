"""`workerpool roles --print-sql` is generated from the schema: no workerpool table is missed."""

from __future__ import annotations

import pytest

from workerpool.migrate import VERSION_TABLE
from workerpool.model.errors import ConfigError
from workerpool.ops.roles import print_sql
from workerpool.sql.schema import metadata


def test_every_table_of_the_schema_is_granted_to_the_worker_and_the_reader():
    script = print_sql()
    for table in set(metadata.tables) - {"workerpool_audit"}:
        assert (
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON public.{table} TO workerpool_worker;"
            in script
        ), table
        assert f"GRANT SELECT ON public.{table} TO workerpool_reader;" in script, table
    assert f"GRANT SELECT ON public.{VERSION_TABLE} TO workerpool_worker;" in script
    assert "TRUNCATE" not in script and "SUPERUSER" not in script


def test_the_audit_trail_is_append_only_to_the_worker_and_public_creates_nothing():
    script = print_sql()
    assert (
        "GRANT SELECT, INSERT (actor, source, action, target, detail) ON"
        " public.workerpool_audit TO workerpool_worker;"
    ) in script
    assert "REVOKE CREATE ON SCHEMA public FROM PUBLIC;" in script
    assert (
        "GRANT EXECUTE ON FUNCTION public.workerpool_prune_audit(double precision, integer)"
        " TO workerpool_worker;"
    ) in script


def test_a_prefix_names_another_set_of_roles_and_a_bad_one_is_refused():
    assert "CREATE ROLE acme_jobs_worker NOLOGIN;" in print_sql("acme_jobs")
    for bad in ("", "Upper", "x;drop role postgres", "1x", "a" * 60):
        with pytest.raises(ConfigError, match="role prefix"):
            print_sql(bad)
