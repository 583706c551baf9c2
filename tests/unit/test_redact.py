"""Every printed database URL hides its secrets: the password in the authority and in the query
(libpq reads ``?password=`` and ``sslpassword=`` too)."""

from __future__ import annotations

from sqlalchemy.engine import make_url

from workerpool.sql.db import redact
from workerpool_demo.database import shown_url


def test_redact_masks_the_password_wherever_the_url_carries_it():
    shown = redact(
        "postgresql://u:pw1@h/db?password=pw2&sslpassword=pw3&sslmode=require&PassWord=pw4"
    )
    assert not any(secret in shown for secret in ("pw1", "pw2", "pw3", "pw4")), shown
    assert "u:***@h" in shown and "sslmode=require" in shown and "sslpassword=***" in shown


def test_the_demo_shows_no_password_of_the_query_either():
    assert "s3cret" not in shown_url(make_url("postgresql://u@h/db?password=s3cret"))
    embedded = make_url("postgresql://postgres:@/demo?host=/tmp/x")  # no secret: shown as is
    assert shown_url(embedded).startswith("postgresql://postgres@/demo")
