"""The plugin's routes on Airflow's real API app, with the real simple auth manager.

The app is ``airflow.api_fastapi.app.create_app`` itself: it loads the plugin
through the ``airflow.plugins`` entry point and mounts it as the API server
does. Tokens come from the auth manager; a user whose token carries no role
is refused every DAG by the simple auth manager, which is how a reader who
may not read the recording DAG is tested.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from elasticgrid_provider.core.state import ScaleState, state_variable_key
from elasticgrid_provider.plugins.timeline import ROWS_PER_PAGE
from tests.plugins.recorded import LAP, T0, check, deadline_job, long_history

pytestmark = pytest.mark.airflow

ROUTES = [
    "/elasticgrid/jobs",
    "/elasticgrid/api/jobs",
    "/elasticgrid/jobs/audit-job",
    "/elasticgrid/api/jobs/audit-job",
    "/elasticgrid/tasks/audit_dag/scale_check/grow",
]


def _store(state: ScaleState) -> None:
    _store_data(state.job_name, state.model_dump())


def _store_data(job_name: str, data: Any) -> None:
    from airflow.models.variable import Variable

    Variable.set(state_variable_key(job_name), json.dumps(data))


def _delete(job_name: str) -> None:
    from airflow.models.variable import Variable

    Variable.delete(state_variable_key(job_name))


@pytest.fixture(scope="module")
def client(airflow_db) -> Iterator[Any]:
    from airflow.api_fastapi.app import create_app, purge_cached_app
    from fastapi.testclient import TestClient

    _store(deadline_job())
    # a job whose recorded task id tries to inject markup
    _store(deadline_job("marked-job", task_id='<img src=x onerror="alert(1)">'))
    # a job with no decision recorded by any DAG yet: guarded by its Variable
    _store(ScaleState("fresh-job", current_nodes=2))
    purge_cached_app()
    with TestClient(create_app(apps="core")) as test_client:
        yield test_client
    purge_cached_app()


def _token(role: str | None, name: str = "reader") -> dict[str, str]:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    user = SimpleAuthManagerUser(username=name, role=role)
    return {"Authorization": f"Bearer {get_auth_manager().generate_jwt(user)}"}


@pytest.mark.parametrize("route", ROUTES)
def test_every_route_needs_credentials_401_and_refuses_a_bad_token_403(client, route):
    assert client.get(route).status_code == 401
    bad = client.get(route, headers={"Authorization": "Bearer not-a-jwt"})
    assert bad.status_code == 403
    assert client.get(route, headers=_token("viewer")).status_code == 200


def test_the_session_cookie_of_a_logged_in_user_is_enough(client):
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    token = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="v", role="viewer"))
    client.cookies.set("_token", token)
    try:
        assert client.get("/elasticgrid/jobs/audit-job").status_code == 200
    finally:
        client.cookies.clear()


def test_routes_are_get_only(client):
    for method in ("post", "put", "delete", "patch"):
        response = getattr(client, method)("/elasticgrid/jobs/audit-job", headers=_token("admin"))
        assert response.status_code == 405, method


def test_the_job_page_shows_summary_signals_conditions_chart_and_timeline(client):
    response = client.get("/elasticgrid/jobs/audit-job", headers=_token("viewer"))
    assert response.status_code == 200
    assert "script-src" not in response.headers["content-security-policy"]
    assert "default-src 'none'" in response.headers["content-security-policy"]
    page = response.text
    assert "<script" not in page
    text = html.unescape(re.sub(r"<[^>]+>", " ", page))
    # the newest check recommends 7 nodes; the cooldown holds the job at 4
    assert "Current nodes 4 Desired nodes 7" in " ".join(text.split())
    for expected in (
        "Current nodes",
        "Desired nodes",
        "Min / max nodes",
        "1 / 8",
        "queue fraction",
        "scale up at >= 0.2; idle at <= 0.05",
        "mean step",
        # the cooldown started at the scale-up (00:05 on 2026-01-01) lasts an hour
        "AbleToScale False BackoffUp held by cooldown until 2026-01-01T01:05:00Z",
        "ScalingLimited False DesiredWithinRange",
        "held 3 times by cooldown",
        "held 3 times by min_samples",
        "queue_bound (target_queue_fraction=0.2, scale_up_factor=2)",
        "cooldown (cooldown_s=3600, scale_down_cooldown_s=3600)",
        "deadline_pressure (deadline_margin=0.07, startup_s=60)",
        "projected finish",
        "750s at 4 nodes, 488.57s at 7 with the restart",
        "deadline 2026-01-01 00:35:00 UTC, 600s left",
        "50% of the step was spent waiting for a worker",
        "$3.00/h -> $6.00/h",
    ):
        assert expected in " ".join(text.split()), expected
    # times read "Nd ago", the full time on hover
    assert '<time datetime="2026-01-01T00:05:00+00:00" title="2026-01-01 00:05:00 UTC">' in page
    assert '<svg xmlns="http://www.w3.org/2000/svg"' in page
    assert page.count('<path class="line"') == 3
    # the run and task that made the scale-up, opened in the top window
    assert '<a href="/dags/audit_dag/runs/grow/tasks/scale_check" target="_top">' in page


def test_the_json_route_serves_the_same_data(client):
    data = client.get("/elasticgrid/api/jobs/audit-job", headers=_token("viewer")).json()
    assert data["summary"]["current_nodes"] == 4
    assert (data["summary"]["min_nodes"], data["summary"]["max_nodes"]) == (1, 8)
    timeline = data["timeline"]
    assert [(row["action"], row["count"]) for row in timeline] == [
        ("hold", 1),
        ("hold", 3),
        ("scale_up", 1),
        ("hold", 3),
    ]
    assert data["summary"]["desired_nodes"] == 7
    assert timeline[2]["at"]["iso"] == "2026-01-01T00:05:00+00:00"
    assert (timeline[2]["cost_per_hour_before"], timeline[2]["cost_per_hour_after"]) == (3.0, 6.0)
    assert [point["nodes"] for point in data["chart"]][:3] == [2, 2, 2]
    assert max(point["nodes"] for point in data["chart"]) == 4
    assert len(data["history"]) == 4
    listing = client.get("/elasticgrid/api/jobs", headers=_token("viewer")).json()["jobs"]
    row = next(row for row in listing if row["job_name"] == "audit-job")
    assert row["dag_ids"] == ["audit_dag"]
    assert row["last_decision"] == "hold 4 -> 4 (deadline_pressure)"
    assert [c["type"] for c in data["conditions"]] == [
        "AbleToScale",
        "ScalingActive",
        "ScalingLimited",
        "MeetsDeadline",
    ]


def test_a_user_who_may_not_read_the_dag_gets_404_and_an_empty_list(client):
    nobody = _token(None, "nobody")
    assert client.get("/elasticgrid/jobs/audit-job", headers=nobody).status_code == 404
    assert client.get("/elasticgrid/api/jobs/audit-job", headers=nobody).status_code == 404
    assert client.get("/elasticgrid/api/jobs", headers=nobody).json() == {"jobs": []}
    assert "audit-job" not in client.get("/elasticgrid/jobs", headers=nobody).text
    # the task-instance tab checks the task's DAG itself (Airflow's own dependency)
    tab = client.get("/elasticgrid/tasks/audit_dag/scale_check/grow", headers=nobody)
    assert tab.status_code == 403


def test_a_job_without_a_recording_dag_needs_read_access_to_its_variable(client):
    # the simple auth manager lets Op and Admin read Variables, not Viewer
    assert client.get("/elasticgrid/jobs/fresh-job", headers=_token("viewer")).status_code == 404
    page = client.get("/elasticgrid/jobs/fresh-job", headers=_token("op"))
    assert page.status_code == 200
    assert "no decision recorded yet" in page.text
    assert client.get("/elasticgrid/jobs/no-such-job", headers=_token("admin")).status_code == 404


def test_every_value_is_escaped(client):
    page = client.get("/elasticgrid/jobs/marked-job", headers=_token("viewer")).text
    assert "<img" not in page
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page


def test_the_task_instance_tab_shows_this_checks_decision_on_top(client):
    tab = "/elasticgrid/tasks/audit_dag/scale_check/grow?map_index={MAP_INDEX}"  # unmapped
    page = client.get(tab, headers=_token("viewer")).text
    assert "Scale decisions: audit-job" in page
    # the matching row heads the page, above the summary and the chart
    top = page.index("This check&#x27;s decision")
    assert top < page.index(">Now<") < page.index("<svg")
    assert page.index('<div class="card">') < page.index(">Now<")
    assert page.index(">Now<") < page.index('<tr class="highlight">')  # and in the timeline
    assert 'datetime="2026-01-01T00:05:00+00:00"' in page[top : page.index(">Now<")]
    other = client.get("/elasticgrid/tasks/audit_dag/plan/grow", headers=_token("viewer"))
    assert other.status_code == 200
    assert "No scale decision here" in other.text
    assert "audit-job" not in other.text


def test_the_tab_of_a_mapped_check_shows_its_own_map_indexs_decision(client):
    # the lookup takes the map_index: each mapped instance shows its own decision
    state = ScaleState("a-mapped-job")
    for index, samples in ((0, 0), (1, 3)):  # a hold for want of samples, then a scale-up
        state = check(state, T0 + 60 * index, 2, samples, "fan", map_index=index)
    _store(state)
    try:
        for index, nodes in ((0, 2), (1, 4)):
            url = f"/elasticgrid/tasks/audit_dag/scale_check/fan?map_index={index}"
            page = client.get(url, headers=_token("viewer")).text
            top = page[page.index("This check&#x27;s decision") : page.index(">Now<")]
            assert f"2 -&gt; {nodes}</span>" in top
            assert f'/runs/fan/tasks/scale_check/mapped/{index}"' in top
        unmapped = client.get(
            "/elasticgrid/tasks/audit_dag/scale_check/fan", headers=_token("viewer")
        )
        assert "No scale decision here" in unmapped.text
    finally:
        _delete(state.job_name)


def test_a_missing_job_is_a_readable_page_not_json(client):
    # what a failed launch's extra link opens: a page saying so, not {"detail": ...}
    response = client.get("/elasticgrid/jobs/never-checked", headers=_token("admin"))
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("text/html")
    assert "detail" not in response.text
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", response.text)).split())
    assert "There are no scale decisions for job never-checked that you may read." in text
    assert "The launch task's log says why a launch failed." in text
    assert '<a href="/elasticgrid/jobs">All jobs with scale decisions</a>' in response.text


def test_times_are_in_the_ui_time_zone(client, monkeypatch):
    monkeypatch.setenv("AIRFLOW__API__DEFAULT_UI_TIMEZONE", "Europe/Paris")
    page = client.get("/elasticgrid/jobs/audit-job", headers=_token("viewer")).text
    assert '<time datetime="2026-01-01T00:05:00+00:00" title="2026-01-01 01:05:00 CET">' in page
    assert "time (CET)" in page  # the chart's axis


def test_one_bad_state_breaks_neither_the_list_nor_another_jobs_page(client):
    # a cost_per_hour of "n/a", a projection of ["x"] or a fuzzed state (fields of the wrong
    # type) answers no 500: not for the whole list, not for that job's page
    states = []
    for name, path, value in (
        ("bad-cost", ("history", -1, "context", "cost_per_hour"), "n/a"),
        ("bad-projection", ("history", -1, "projection"), ["x"]),
        ("bad-dag", ("history", -1, "context", "dag_id"), ["audit_dag"]),
        ("bad-time", ("history", -1, "decided_at"), 1e308),
        ("bad-history", ("history",), {"x": 1}),
    ):
        data = deadline_job(name).model_dump()
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        _store_data(name, data)
        states.append(name)
    try:
        listing = client.get("/elasticgrid/jobs", headers=_token("admin"))
        assert listing.status_code == 200
        for name in (*states, "audit-job"):
            assert f">{name}</a>" in listing.text, name
        assert client.get("/elasticgrid/api/jobs", headers=_token("admin")).status_code == 200
        for name in (*states, "audit-job"):
            for route in (f"/elasticgrid/jobs/{name}", f"/elasticgrid/api/jobs/{name}"):
                assert client.get(route, headers=_token("admin")).status_code == 200, route
        assert (
            "Scale decisions: audit-job"
            in client.get("/elasticgrid/jobs/audit-job", headers=_token("viewer")).text
        )
    finally:
        for name in states:
            _delete(name)


# -- a long history: folded and paged (1,000 decisions; 3,000 in Chromium) ----------------

DECISIONS = 1_000  # the Chromium test pages 3,000 (test_ui_true_numbers.py)
ROWS = DECISIONS // LAP * 3  # a lap: a hold, a scale-up, one folded run of eight holds


@pytest.fixture(scope="module")
def long_job(client) -> Iterator[str]:
    """A job of :data:`DECISIONS` decisions (:func:`long_history`), stored as the sensor does."""
    from airflow.models.variable import Variable

    Variable.set(state_variable_key("long-job"), long_history(DECISIONS), serialize_json=True)
    yield "long-job"
    Variable.delete(state_variable_key("long-job"))


def _words(page: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def _rows(page: str) -> list[str]:
    table = page[page.index('id="timeline"') :]
    return re.findall(r"<tr[^>]*>(.*?)</tr>", table[table.index("<tbody>") :])


def test_a_long_history_is_folded_and_paged(client, long_job):
    response = client.get("/elasticgrid/jobs/long-job", headers=_token("viewer"))
    assert response.status_code == 200
    page = response.text
    assert len(page) < 300_000  # 3,000 rows of before took 2.7 MB
    rows = _rows(page)
    assert len(rows) == ROWS_PER_PAGE
    pages = -(-ROWS // ROWS_PER_PAGE)
    assert f"page 1 of {pages} ({ROWS} rows)" in _words(page)
    # the newest run: eight holds alternating between the rules holding them back, one row
    newest = _words(rows[0])
    assert "held 8 times by cooldown and stabilisation" in newest
    assert "(8 records)" in newest
    run = f"{DECISIONS - 8}-{DECISIONS - 1}"
    assert f'href="/elasticgrid/jobs/long-job?run={run}#timeline"' in rows[0]
    # its link shows those eight decisions one by one, and the way back
    one_by_one = client.get(f"/elasticgrid/jobs/long-job?run={run}", headers=_token("viewer"))
    assert len(_rows(one_by_one.text)) == 8
    assert f"Records {run} one by one; all decisions ." in _words(one_by_one.text)
    # the oldest page ends with the first decision: a hold for want of samples
    oldest = client.get(f"/elasticgrid/jobs/long-job?page={pages}", headers=_token("viewer"))
    assert f"page {pages} of {pages}" in _words(oldest.text)
    assert "min_samples" in _words(_rows(oldest.text)[-1])
    assert 'href="/elasticgrid/jobs/long-job?page=1#timeline">newest</a>' in oldest.text
    # the chart of a long history is drawn from a bounded number of points
    data = client.get("/elasticgrid/api/jobs/long-job?page=2", headers=_token("viewer")).json()
    assert len(data["chart"]) < 2_000
    assert data["timeline_page"] == {
        "page": 2,
        "pages": pages,
        "rows_per_page": ROWS_PER_PAGE,
        "total_rows": ROWS,
        "run": None,
    }
    shown = sum(row.get("entries", 1) for row in data["timeline"])
    assert len(data["history"]) == shown and len(json.dumps(data)) < 1_000_000


def test_a_check_deep_in_the_history_opens_on_its_page(client, long_job):
    # run-11 is the 12th decision: the second lap's scale-up, on the last page
    url = "/elasticgrid/jobs/long-job?dag_id=audit_dag&run_id=run-11&task_id=scale_check"
    page = client.get(url, headers=_token("viewer")).text
    card = page[page.index("This check&#x27;s decision") : page.index(">Now<")]
    assert "scale_up" in card and "run-11" in card
    highlighted = re.findall(r'<tr class="highlight">(.*?)</tr>', page)
    assert len(highlighted) == 1 and "run-11" in highlighted[0]
    pages = -(-ROWS // ROWS_PER_PAGE)
    assert f"page {pages} of {pages}" in _words(page)
    # paging keeps the check on top
    assert "run_id=run-11&amp;task_id=scale_check&amp;map_index=-1&amp;page=1#timeline" in page
