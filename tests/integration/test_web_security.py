"""The dashboard's guards against real PostgreSQL: CSRF, the token, read-only, escaping, the
database password, the bind refusal, and the app mounted under a path prefix."""

from __future__ import annotations

import base64
import re

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from tests.apps import web
from tests.helpers.cli import run_cli
from tests.helpers.db import job_state
from tests.helpers.paths import ROOT
from tests.helpers.web import client, csrf, dead_jobs, post
from workerpool.model.errors import ConfigError
from workerpool.web import app
from workerpool.web.security import check_bind

SENTINEL = "sentinel-pw-3f9c2a"
TOKEN = "s3cret-token-for-tests-0123456789"
ACTIONS = [
    "/jobs/1/retry",
    "/jobs/1/cancel",
    "/dead/retry",
    "/dead/purge",
    "/queues/email/pause",
    "/queues/email/resume",
]


@pytest.fixture
def app_pool(db_url):
    pool = web.build(db_url.set(password=SENTINEL))  # trust auth: the password is not checked
    yield pool
    pool.dispose()


def test_a_post_without_a_valid_csrf_token_is_refused(app_pool, http, sql):
    job_id = app_pool.enqueue("ok", {}, delay=600)
    http.get("/")  # the cookie is set
    refused = [
        http.post(f"/jobs/{job_id}/cancel", data={}, follow_redirects=False),
        http.post(f"/jobs/{job_id}/cancel", data={"csrf_token": "0" * 64}),
        http.post(
            f"/jobs/{job_id}/cancel",
            data={"csrf_token": csrf(http)},
            headers={"Origin": "http://evil.example"},
        ),
    ]
    with client(app_pool) as other:  # a token signed by another process's secret
        refused.append(http.post(f"/jobs/{job_id}/cancel", data={"csrf_token": csrf(other)}))
    fresh = TestClient(http.app, base_url="http://localhost")  # the right token, no cookie
    refused.append(fresh.post(f"/jobs/{job_id}/cancel", data={"csrf_token": csrf(http)}))
    for answer in refused:
        assert answer.status_code == 403
        assert "CSRF token" in answer.text or "another site" in answer.text
    assert job_state(sql, job_id) == "pending"
    assert post(http, f"/jobs/{job_id}/cancel").status_code == 303


def test_the_csrf_cookie_is_strict_and_http_only(http):
    cookie = http.get("/").headers["set-cookie"]
    assert "workerpool_csrf=" in cookie and "HttpOnly" in cookie
    assert "SameSite=strict" in cookie or "samesite=strict" in cookie.lower()


def test_read_only_serves_no_action(app_pool, sql):
    job_id = dead_jobs(app_pool, 1)[0]
    with client(app_pool, read_only=True) as http:
        for path in ACTIONS:
            assert http.post(path, data={}).status_code in (404, 405), path
        job = http.get(f"/jobs/{job_id}").text
        overview = http.get("/").text
        dead = http.get("/dead").text
    assert '<form method="post"' not in job + overview + dead
    assert "read-only" in overview
    assert job_state(sql, job_id) == "dead"


def test_with_a_token_every_request_needs_it(app_pool):
    with client(app_pool, token=TOKEN) as http:
        bare = http.get("/")
        assert bare.status_code == 401 and "Basic" in bare.headers["www-authenticate"]
        assert http.get("/static/style.css").status_code == 401
        assert http.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert http.post("/queues/email/pause").status_code == 401
        assert http.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        basic = base64.b64encode(f"ops:{TOKEN}".encode()).decode()
        assert http.get("/", headers={"Authorization": f"Basic {basic}"}).status_code == 200
        assert http.get("/", headers={"Authorization": "Basic !!!"}).status_code == 401


def test_the_token_comes_from_the_environment(app_pool, monkeypatch):
    monkeypatch.setenv("WORKERPOOL_WEB_TOKEN", TOKEN)
    with TestClient(app(app_pool)) as http:
        assert http.get("/").status_code == 401
    monkeypatch.setenv("WORKERPOOL_WEB_TOKEN", "short")
    with pytest.raises(ConfigError, match="at least 16 characters"):
        app(app_pool)


def test_markup_in_any_value_is_shown_as_text(app_pool, http, sql):
    job_id = dead_jobs(app_pool, 1, html=web.SCRIPT)[0]
    sql(
        "INSERT INTO workerpool_jobs (queue, task, key) VALUES"
        " ('<script>q()</script>', '<img src=x onerror=t()>', '<b>key</b>')"
    )
    sql(
        "INSERT INTO workerpool_queues (queue, paused, paused_by) VALUES"
        " ('<script>q()</script>', true, '<i>ops</i>')"
    )
    pages = [
        http.get(path).text
        for path in ("/", "/jobs", f"/jobs/{job_id}", "/dead", "/jobs?key=<b>key</b>")
    ]
    for page in pages:
        assert "<script>alert" not in page and "<script>q()" not in page
        assert "<img src=x" not in page and "<b>key</b>" not in page and "<i>ops" not in page
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in pages[2]  # payload and error
    assert "&lt;img src=x onerror=t()&gt;" in pages[1]
    assert "&lt;script&gt;q()&lt;/script&gt;" in pages[0]  # the queue name
    assert "&lt;i&gt;ops&lt;/i&gt;" in pages[0]  # who paused it


def test_the_database_password_never_reaches_a_page(app_pool, http, db_url):
    job_id = dead_jobs(app_pool, 1)[0]
    bodies = [
        http.get(path).text
        for path in ("/", "/jobs", f"/jobs/{job_id}", "/dead", "/jobs?state=bogus", "/nowhere")
    ]
    bodies.append(post(http, "/dead/retry", {}).text)
    broken = web.build(db_url.set(database="wp_no_such_db", password=SENTINEL))
    with client(broken) as failing:
        answer = failing.get("/")
    broken.dispose()
    assert answer.status_code == 500 and "internal error (OperationalError)" in answer.text
    bodies.append(answer.text)
    assert all(SENTINEL not in body for body in bodies)


def test_every_page_works_offline_and_without_inline_script(app_pool, http):
    job_id = dead_jobs(app_pool, 1)[0]
    for path in ("/", "/jobs", f"/jobs/{job_id}", "/dead"):
        page = http.get(path).text
        assert not re.search(r'(?:src|href|action)="(?:https?:)?//', page), path  # nothing remote
        assert not re.search(r"<script(?![^>]*\bsrc=)", page), path  # every script is a file
        assert not re.search(r"<[a-z]+\s[^>]*\b(?:style|on[a-z]+)=", page), path  # inline
        assert "<style" not in page, path


def test_security_headers_forbid_inline_script_and_framing(http):
    headers = http.get("/").headers
    policy = headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert headers["x-content-type-options"] == "nosniff"


def test_mounted_under_a_prefix_every_link_and_action_keeps_it(app_pool, sql):
    job_id = dead_jobs(app_pool, 1)[0]
    outer = Starlette(routes=[Mount("/ops/jobs", app=app(app_pool, token=None))])
    with TestClient(outer, base_url="http://127.0.0.1:8080") as http:
        page = http.get("/ops/jobs/")
        assert page.status_code == 200
        links = re.findall(r'(?:href|src|action)="(?!data:)([^"]+)"', page.text)
        assert links and all(link.startswith("/ops/jobs/") for link in links), links
        assert http.get("/ops/jobs/static/htmx.min.js").status_code == 200
        assert "workerpool_csrf" in page.headers["set-cookie"]
        assert "Path=/ops/jobs" in page.headers["set-cookie"]
        token = re.search(r'name="csrf_token" value="([0-9a-f]+)"', page.text)[1]
        answer = http.post(
            f"/ops/jobs/jobs/{job_id}/retry", data={"csrf_token": token}, follow_redirects=False
        )
        assert answer.status_code == 303 and answer.headers["location"] == "/ops/jobs/dead"
    assert job_state(sql, job_id) == "pending"


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.10", "::", "example.org"])
def test_an_open_bind_needs_a_token(host):
    with pytest.raises(ConfigError, match="without authentication"):
        check_bind(host, None)
    check_bind(host, TOKEN)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_a_loopback_bind_needs_none(host):
    check_bind(host, None)


@pytest.mark.slow  # the CLI as a subprocess
def test_the_command_refuses_an_open_bind_before_listening(db_url, tmp_path):
    result = run_cli("web", "--bind", "0.0.0.0", "--port", "1", url=db_url, cwd=ROOT)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "workerpool web: refusing to bind '0.0.0.0' (not a loopback address) without "
        "authentication: set WORKERPOOL_WEB_TOKEN, or bind 127.0.0.1"
    ]
    bad_port = run_cli("web", "--port", "70000", url=db_url, cwd=ROOT)
    assert bad_port.returncode == 1 and "--port must be within 1..65535" in bad_port.stderr


def test_a_foreign_host_is_refused_before_anything_is_read_or_written(app_pool, sql):
    """DNS rebinding: a page of evil.example, its name pointed at 127.0.0.1, is same-origin
    with the dashboard; its requests carry ``Host: evil.example``."""
    job_id = app_pool.enqueue("ok", {"secret": "payload-9d1e"}, delay=600)
    with client(app_pool) as http:
        token = csrf(http)
        for host in ("evil.example", "evil.example:8080", "127.0.0.1.evil.example", "", "x y"):
            page = http.get(f"/jobs/{job_id}", headers={"Host": host})
            assert page.status_code == 400 and "payload-9d1e" not in page.text, host
            assert "loopback names only" in page.text
        paused = http.post(
            "/queues/email/pause",
            data={"csrf_token": token},
            headers={"Host": "evil.example:8080", "Origin": "http://evil.example:8080"},
        )
        assert paused.status_code == 400
        for host in ("localhost:8080", "127.0.0.1", "[::1]:80", "dash.localhost", "127.0.0.2"):
            assert http.get("/", headers={"Host": host}).status_code == 200, host
    assert sql("SELECT paused FROM workerpool_queues WHERE queue = 'email'") in ([], [(False,)])
    assert sql("SELECT count(*) FROM workerpool_audit")[0][0] == 0


def test_hosts_names_the_ones_served_and_a_token_or_user_serves_any(app_pool):
    with client(app_pool, hosts=["jobs.internal"]) as http:
        assert http.get("/", headers={"Host": "jobs.internal:8080"}).status_code == 200
        assert http.get("/", headers={"Host": "evil.example"}).status_code == 400
    with TestClient(app(app_pool, token=TOKEN), base_url="http://jobs.example.com") as http:
        assert http.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    with TestClient(
        app(app_pool, token=None, user=lambda request: ("ann", "admin")),
        base_url="http://jobs.example.com",
    ) as http:
        assert http.get("/").status_code == 200
    with TestClient(app(app_pool, token=None, hosts=None), base_url="http://any.example") as http:
        assert http.get("/").status_code == 200
    with pytest.raises(ConfigError, match="list of host names"):
        app(app_pool, token=None, hosts="jobs.internal")


def test_a_notice_cookie_set_by_another_page_shows_nothing(app_pool):
    """Cookies are shared by every port of a host: another port's page may set the notice
    cookie; the dashboard shows only the notices it left itself."""
    with client(app_pool) as http:
        forged = "Your%20session%20expired%3A%20log%20in%20at%20evil.example"
        page = http.get("/", headers={"Cookie": f"workerpool_notice={forged}"})
        assert page.status_code == 200 and "evil.example" not in page.text
        assert 'id="notice"' not in page.text
        assert post(http, "/queues/email/pause").status_code == 303
        assert "queue email paused" in http.get("/").text


BIG = "9" * 30


@pytest.mark.parametrize(
    "path",
    [
        f"/audit?before={BIG}",
        f"/jobs?before={BIG}",
        f"/batches/1?after={BIG}",
        "/jobs?since=99999999999d",
        "/jobs?until=9999999999999999w",
        "/dead?since=99999999999d",
        "/jobs?key=a%00b",
        "/search?q=a%00b",
        "/audit?actor=a%00b",
    ],
)
def test_out_of_range_numbers_and_nul_are_refused_with_one_line(app_pool, http, path):
    page = http.get(path)
    assert page.status_code == 400, (path, page.status_code)
    assert "internal error" not in page.text


def test_bad_action_fields_are_refused_before_anything_is_written(app_pool, http, sql):
    job_id = app_pool.enqueue("ok", {}, delay=600)
    for path, form in (
        (f"/jobs/{job_id}/cancel", {"reason": "x" * 1_000_000}),
        (f"/jobs/{job_id}/cancel", {"reason": "a\x00b"}),
        ("/dead/purge", {"older_than": "99999999999d"}),
        ("/dead/retry", {"since": "99999999999d"}),
    ):
        answer = post(http, path, form)
        assert answer.status_code == 400 and "internal error" not in answer.text, path
    assert job_state(sql, job_id) == "pending"
    assert sql("SELECT count(*) FROM workerpool_audit")[0][0] == 0


def test_an_inconsistent_cron_row_leaves_the_cron_page_working(app_pool, http, sql):
    """A row edited by hand (or by an older version): paused with no time, changed with none."""
    sql(
        "INSERT INTO workerpool_cron (name, queue, expression, paused, changed_by)"
        " VALUES ('odd', 'email', '* * * * *', true, 'someone')"
    )
    page = http.get("/cron")
    assert page.status_code == 200 and 'id="cron-odd"' in page.text
    assert "paused</span> by ? at ?" in page.text and "someone at ?" in page.text


def test_the_cron_page_reads_its_times_relative_with_the_exact_one_on_hover(app_pool, http, sql):
    sql(
        "INSERT INTO workerpool_cron (name, queue, expression, next_tick, paused, paused_at,"
        " paused_by) VALUES ('nightly', 'email', '0 3 * * *', now() + interval '2 hours',"
        " true, now() - interval '5 minutes', 'op')"
    )
    [(tick,)] = sql("SELECT next_tick FROM workerpool_cron")
    row = http.get("/cron").text.split('id="cron-nightly"')[1].split("</tr>")[0]
    assert re.search(
        r'<td class="next"><time class="when" [^>]*title="'
        + re.escape(tick.isoformat(sep=" ", timespec="seconds"))
        + r'">in 2 h</time>',
        row,
    ), row
    assert re.search(r'by op <time class="when" [^>]*>5 min ago</time>', row), row
