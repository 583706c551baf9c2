"""Who acted, against real PostgreSQL: every operator action writes its audit entry in its own
transaction (a rolled-back action leaves none), with the actor and source the caller set; the
list filters and pages; old entries are pruned; and the dashboard's user resolver names the
actor and refuses a read-only user's action and nobody with 403, nothing written."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.apps import web
from tests.apps.cron_runtime import build as build_cron_app
from tests.helpers.web import client, csrf, dead_jobs, post
from workerpool import ConfigError
from workerpool.model.audit import acting
from workerpool.model.errors import InvalidActor, InvalidFilter, UnknownQueue
from workerpool.ops import audit, dead
from workerpool.runtime.maintenance import Maintenance
from workerpool.web import User


@pytest.fixture
def app(db_url):
    pool = web.build(db_url)
    yield pool
    pool.dispose()


def entries(sql):
    return sql("SELECT actor, source, action, target FROM workerpool_audit ORDER BY id")


def test_each_action_records_who_what_and_where_from(app, sql):
    job = app.enqueue("ok", {})
    app.cancel([job], by="alice", reason="not needed")
    app.pause("email", by="alice")
    with acting("bob", "cli"):
        app.resume("email")
    [dead_id] = dead_jobs(app)
    with acting(None, "web"):  # no name given: the operation's default, user@host
        dead.retry(app, [dead_id])
    dead_jobs(app)
    dead.purge(app, 0, by="carol")
    got = entries(sql)
    assert got[:3] == [
        ("alice", "api", "cancel", f"jobs:{job}"),
        ("alice", "api", "pause", "queue:email"),
        ("bob", "cli", "resume", "queue:email"),
    ]
    actor, source, action, target = got[3]
    assert ("@" in actor, source, action, target) == (True, "web", "retry", f"dead ids={dead_id}")
    assert got[4][:3] == ("carol", "api", "purge")
    assert sql("SELECT detail->'reason' FROM workerpool_audit WHERE action = 'cancel'") == [
        ("not needed",)
    ]


def test_the_entry_commits_or_rolls_back_with_the_action(app, sql):
    job = app.enqueue("ok", {})
    with app.engine.connect() as conn:
        trans = conn.begin()
        app.cancel([job], conn=conn, by="alice")
        trans.rollback()
    assert entries(sql) == [] and sql("SELECT state FROM workerpool_jobs")[0][0] == "pending"
    with app.engine.begin() as conn:
        app.cancel([job], conn=conn, by="alice")
    assert entries(sql) == [("alice", "api", "cancel", f"jobs:{job}")]


def test_a_refused_action_or_a_dry_run_records_nothing(app, sql):
    with pytest.raises(UnknownQueue):
        app.pause("nope", by="alice")
    with pytest.raises(InvalidActor):
        app.pause("email", by="")
    job = app.enqueue("ok", {})
    app.cancel([job], by="alice", dry_run=True)
    dead_jobs(app)
    dead.retry(app, all_matching=True, dry_run=True)
    dead.purge(app, 0, dry_run=True)
    assert entries(sql) == []
    assert sql("SELECT count(*) FROM workerpool_queues WHERE paused")[0][0] == 0


def test_the_list_filters_and_pages_newest_first(app, sql):
    for n in range(5):
        app.pause("email", by=f"user{n % 2}")
    page = audit.list_audit(app, limit=2)
    assert [e.actor for e in page.entries] == ["user0", "user1"]
    older = audit.list_audit(app, limit=2, before=page.before)
    assert [e.actor for e in older.entries] == ["user0", "user1"]
    last = audit.list_audit(app, limit=2, before=older.before)
    assert [e.actor for e in last.entries] == ["user0"] and last.before is None
    assert len(audit.list_audit(app, actor="user1").entries) == 2
    assert audit.list_audit(app, action="cron_run").entries == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"action": "delete"}, "action must be one of"),
        ({"actor": ""}, "actor must be"),
        ({"before": 0}, "before must be a positive"),
        ({"before": "7"}, "before must be a positive"),
        ({"limit": 0}, "limit must be an int within"),
        ({"limit": 501}, "limit must be an int within"),
    ],
)
def test_bad_list_filters_are_refused_by_name(app, options, message):
    with pytest.raises(InvalidFilter, match=message):
        audit.list_audit(app, **options)


def test_the_maintenance_child_prunes_entries_past_the_retention(app, sql):
    app.pause("email", by="old")
    app.pause("email", by="new")
    sql("UPDATE workerpool_audit SET at = now() - interval '91 days' WHERE actor = 'old'")
    Maintenance(app.registry, app.engine, worker_id="m").prune_records()
    assert [e[0] for e in entries(sql)] == ["new"]
    app.maintenance(audit_retention=timedelta(hours=1))
    sql("UPDATE workerpool_audit SET at = now() - interval '2 hours'")
    Maintenance(app.registry, app.engine, worker_id="m").prune_records()
    assert entries(sql) == []
    with pytest.raises(ConfigError, match="audit_retention must be"):
        app.maintenance(audit_retention=-1)


# -- the dashboard's user resolver ------------------------------------------------------------


@pytest.fixture
def cron_app(db_url):
    pool = build_cron_app(db_url)
    yield pool
    pool.dispose()


def as_user(http, name):
    http.cookies.set("who", name)
    return http


def test_the_resolved_user_is_recorded_and_shown(cron_app, sql):
    from tests.apps.cron_runtime import who

    with client(cron_app, user=who) as http:
        as_user(http, "alice")
        answer = post(http, "/cron/beat/pause", page="/cron")
        assert answer.status_code == 303
        page = http.get("/cron").text
        assert 'id="user">alice<' in page and "paused</span> by alice" in page
        assert entries(sql) == [("alice", "web", "cron_pause", "cron:beat")]
        audit_page = http.get("/audit?action=cron_pause").text
        assert "alice" in audit_page and "cron:beat" in audit_page


def test_a_read_only_user_sees_no_buttons_and_a_forged_post_gets_403(cron_app, sql):
    from tests.apps.cron_runtime import who

    with client(cron_app, user=who) as http:
        token = csrf(as_user(http, "alice"), "/cron")
        as_user(http, "bob")
        page = http.get("/cron")
        assert page.status_code == 200 and "Pause</button>" not in page.text
        assert "read-only" in page.text
        for path in ("/cron/beat/pause", "/cron/beat/run", "/queues/cron/pause"):
            answer = http.post(path, data={"csrf_token": token}, follow_redirects=False)
            assert answer.status_code == 403, path
            assert answer.text == "forbidden: bob has read-only access\n"
        as_user(http, "mallory")  # the resolver names nobody
        assert http.get("/cron").status_code == 403
        assert http.post("/cron/beat/pause", data={"csrf_token": token}).status_code == 403
    assert entries(sql) == []
    assert sql("SELECT count(*) FROM workerpool_cron WHERE paused")[0][0] == 0


def test_without_a_resolver_actions_are_recorded_as_the_client_address(cron_app, sql):
    with client(cron_app) as http:
        assert post(http, "/cron/nightly/run", {"request": "abc"}, page="/cron").status_code == 303
        assert post(http, "/cron/nightly/run", {"request": "abc"}, page="/cron").status_code == 303
        assert 'id="user"' not in http.get("/cron").text
    assert entries(sql) == [("web@testclient", "web", "cron_run", "cron:nightly")]
    assert sql("SELECT count(*) FROM workerpool_jobs")[0][0] == 1  # one request, one job


@pytest.mark.parametrize(
    ("method", "path", "form", "status", "message"),
    [
        ("post", "/cron/nope/pause", {}, 404, "unknown cron &#39;nope&#39;"),
        ("post", "/cron/beat/explode", {}, 400, "unknown cron action"),
        ("post", "/cron/beat/run", {"request": "a b"}, 400, "request must be"),
        ("post", "/cron/bad!name/resume", {}, 400, "cron name"),
        ("get", "/audit?action=drop", None, 400, "action must be one of"),
        ("get", "/audit?before=x", None, 400, "before must be a positive"),
    ],
)
def test_bad_input_over_http_is_refused_by_name_with_nothing_written(
    cron_app, sql, method, path, form, status, message
):
    with client(cron_app) as http:
        answer = post(http, path, form, page="/cron") if method == "post" else http.get(path)
    assert answer.status_code == status and message in answer.text
    assert entries(sql) == [] and sql("SELECT count(*) FROM workerpool_jobs")[0][0] == 0
    assert sql("SELECT count(*) FROM workerpool_cron WHERE paused")[0][0] == 0


def test_a_bad_resolver_is_refused_when_the_app_is_built(cron_app):
    from workerpool.web import app

    with pytest.raises(ConfigError, match="user= must be a callable"):
        app(cron_app, user="alice", token=None)
    with pytest.raises(InvalidActor, match="access must be one of"):
        User("alice", "root")


def test_a_resolver_answer_of_the_wrong_shape_is_a_500_with_one_line(cron_app, sql):
    with client(cron_app, user=lambda request: "alice") as http:
        answer = http.get("/cron")
    assert answer.status_code == 500 and "user resolver failed" in answer.text
