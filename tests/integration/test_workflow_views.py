"""What operators see of waiting jobs: ``workerpool status`` counts them by what they wait for,
the "why is this job not running" answer names the parent or the sequence head, and the
dashboard draws a workflow as an SVG graph on ``/workflows/ID``, linked from its jobs' pages."""

from __future__ import annotations

import re

from workerpool.ops import status, why
from workerpool.testing import drain


def test_status_counts_waiting_jobs_by_parents_and_sequence(app_pool):
    head = app_pool.enqueue("ok", {}, delay=3600)
    app_pool.enqueue("ok", {}, after=[head])
    app_pool.enqueue("ok", {}, after=[head])
    app_pool.enqueue("ok", {}, sequence="s", delay=3600)
    app_pool.enqueue("ok", {}, sequence="s")
    report = status.collect(app_pool.engine)
    email = report["queues"]["email"]
    assert email["counts"]["waiting"] == 3
    assert email["waiting_for"] == {"parents": 2, "sequence": 1}
    text = status.render(report)
    assert "WAITING JOBS BY WHAT THEY WAIT FOR" in text
    assert re.search(r"^  email\s+2\s+1$", text, re.M), text


def test_why_names_the_parent_or_the_sequence_head(app_pool):
    parent = app_pool.enqueue("ok", {}, delay=3600)
    child = app_pool.enqueue("ok", {}, after=[parent])
    head = app_pool.enqueue("ok", {}, sequence="customer:42", delay=3600)
    behind = app_pool.enqueue("ok", {}, sequence="customer:42")
    with app_pool.engine.connect() as conn:
        by_parent = why.explain(conn, child)
        by_sequence = why.explain(conn, behind)
    assert [r.code for r in by_parent.reasons] == ["parents"]
    assert f"parent job {parent} (ok, pending) is not done" in why.line(by_parent)
    assert [r.code for r in by_sequence.reasons] == ["sequence"]
    assert f"job {head} (ok, pending) is ahead of it in sequence 'customer:42'" in why.line(
        by_sequence
    )


def test_why_names_a_dead_head_that_blocks_its_sequence(app_pool, sql):
    head = app_pool.enqueue("ok", {}, sequence="s", delay=3600)
    behind = app_pool.enqueue("ok", {}, sequence="s")
    # the head's task blocks its sequence (on_failure="block"), and it died
    sql("UPDATE workerpool_job_dependencies SET if_failed = 'hold' WHERE job_id = %s", behind)
    sql(
        "UPDATE workerpool_jobs SET state = 'dead', dead_reason = 'permanent',"
        " finished_at = now() WHERE id = %s",
        head,
    )
    with app_pool.engine.connect() as conn:
        answer = why.line(why.explain(conn, behind))
    assert f"job {head} (ok), ahead of it in sequence 's', is dead" in answer
    assert "replay it or purge it" in answer


def test_the_workflow_page_draws_the_graph_coloured_by_state(app_pool, http):
    wf = app_pool.workflow()
    wf.step("fetch", "ok", {})
    wf.step("parse", "ok", {}, after=["fetch"])
    wf.step("fail", "boom", {}, after=["fetch"])
    wf.step("store", "ok", {}, after=["parse", "fail"])
    ids = wf.run()
    drain(app_pool, "email")
    job_page = http.get(f"/jobs/{ids['parse']}")
    assert f'href="/workflows/{ids["fetch"]}"' in job_page.text
    page = http.get(f"/workflows/{ids['fetch']}")
    assert page.status_code == 200 and '<svg class="workflow"' in page.text
    for name, state in (
        ("fetch", "done"),
        ("parse", "done"),
        ("fail", "dead"),
        ("store", "cancelled"),
    ):
        node = re.search(
            rf'<a href="/jobs/{ids[name]}" id="node-{ids[name]}"><rect [^>]*'
            rf'class="node (\w+)"><title>{ids[name]} {name} \((ok|boom)\):'
            rf".*?<text [^>]*>{ids[name]} {name}</text>",
            page.text,
        )
        assert node and node[1] == state, (name, page.text)  # labelled by its step's name
    assert page.text.count('class="edge after"') == 4
    chain = app_pool.chain([("ok", {}), ("ok", {})])
    page = http.get(f"/workflows/{chain[0]}").text
    assert f">{chain[1]} ok</text>" in page  # a chain's job: by its task


def test_a_workflow_page_for_nothing_is_a_404_and_a_bad_id_a_400(app_pool, http):
    assert http.get("/workflows/999999").status_code == 404
    assert http.get("/workflows/abc").status_code == 400


def test_the_sequence_page_shows_its_line_head_first_linked_from_its_jobs(app_pool, http):
    head = app_pool.enqueue("ok", {}, sequence="customer:42", delay=3600)
    behind = [app_pool.enqueue("ok", {}, sequence="customer:42") for _ in range(2)]
    app_pool.enqueue("ok", {}, sequence="other")
    job_page = http.get(f"/jobs/{behind[0]}")
    assert 'href="/sequences/customer%3A42"' in job_page.text
    page = http.get("/sequences/customer%3A42")
    assert page.status_code == 200
    rows = page.text.split('id="sequence-line"')[1].split("</table>")[0]
    assert [int(cell) for cell in re.findall(r'href="/jobs/(\d+)"', rows)] == [head, *behind]
    assert rows.count('class="state waiting"') == 2 and 'class="state pending"' in rows
    empty = http.get("/sequences/nobody")
    assert empty.status_code == 200 and 'id="sequence-empty"' in empty.text
    assert http.get("/sequences/%20").status_code == 400


def test_the_workflows_list_shows_each_with_its_progress_newest_first(
    app_pool, http, sql, monkeypatch
):
    from workerpool.runtime.maintenance import Maintenance

    def flow() -> dict:
        graph = app_pool.workflow()
        graph.step("fetch", "ok", {})
        graph.step("parse", "ok", {}, after=["fetch"])
        graph.step("fail", "boom", {}, after=["fetch"])
        return graph.run()

    first = flow()
    drain(app_pool, "email")  # first: fetch and parse done, fail dead
    app_pool.maintenance(history_delay=0)
    Maintenance(app_pool.registry, app_pool.engine, worker_id="m").keep_history()
    second = flow()  # all pending
    page = http.get("/workflows")
    assert page.status_code == 200
    ids = [int(i) for i in re.findall(r'<tr id="workflow-(\d+)">', page.text)]
    assert ids == [second["fetch"], first["fetch"]]

    def ended(workflow_id: int) -> str:
        row = re.search(rf'<tr id="workflow-{workflow_id}">(.*?)</tr>', page.text, re.S)[1]
        return re.search(r'<td class="ended">(.*?)</td>', row)[1]

    assert ended(first["fetch"]) == "3 / 3"  # its done jobs were read from the history
    assert ended(second["fetch"]) == "0 / 3"
    assert 'aria-label="3 of 3 ended"' in page.text
    monkeypatch.setattr("workerpool.web.workflow_pages.LISTED", 1)
    one = http.get("/workflows").text
    older = re.search(r'href="/workflows\?before=(\d+)" id="page-older"', one)[1]
    rest = http.get(f"/workflows?before={older}").text
    assert re.findall(r'<tr id="workflow-(\d+)">', rest) == [str(first["fetch"])]
