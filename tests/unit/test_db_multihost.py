"""A multi-host URL (a primary and its standbys, for failover) builds engines and the LISTEN
connection's arguments: libpq's ``host=a,b port=p,q target_session_attrs=read-write``."""

from __future__ import annotations

from sqlalchemy.engine import make_url

from workerpool.sql import db

MULTI = make_url(
    "postgresql+psycopg://app:pw@/jobs?host=10.0.0.1:5432&host=10.0.0.2:5433"
    "&target_session_attrs=read-write"
)


def test_a_multi_host_url_is_tcp_and_becomes_libpq_lists():
    assert not db.on_unix_socket(MULTI)
    kwargs = db.connect_kwargs(MULTI)
    assert (kwargs["host"], kwargs["port"]) == ("10.0.0.1,10.0.0.2", "5432,5433")
    assert kwargs["target_session_attrs"] == "read-write" and kwargs["dbname"] == "jobs"
    options = db.engine_options(
        MULTI, application_name="t", pool_size=1, connect_timeout=None, session_settings=None
    )
    assert "tcp_user_timeout" in options["connect_args"]


def test_a_unix_socket_url_still_drops_the_tcp_only_setting():
    url = make_url("postgresql+psycopg://app@/jobs?host=/run/postgresql")
    assert db.on_unix_socket(url)
    options = db.engine_options(
        url, application_name="t", pool_size=1, connect_timeout=None, session_settings=None
    )
    assert "tcp_user_timeout" not in options["connect_args"]
