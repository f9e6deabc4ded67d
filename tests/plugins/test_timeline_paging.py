"""A job of 3,000 decisions on Airflow's real API app: the timeline folds the runs of holds
and shows a page at a time; the chart stays small; a decision deep in the history is found."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from elasticgrid_provider.core.state import state_variable_key
from elasticgrid_provider.plugins.timeline import ROWS_PER_PAGE
from tests.plugins.recorded import LAP, long_history
from tests.plugins.test_app import _token

pytestmark = pytest.mark.airflow

DECISIONS = 3_000
ROWS = DECISIONS // LAP * 3  # a lap: a hold, a scale-up, one folded run of eight holds


@pytest.fixture(scope="module")
def client(airflow_db) -> Iterator[Any]:
    from airflow.api_fastapi.app import create_app, purge_cached_app
    from airflow.models.variable import Variable
    from fastapi.testclient import TestClient

    Variable.set(state_variable_key("long-job"), long_history(DECISIONS), serialize_json=True)
    purge_cached_app()
    with TestClient(create_app(apps="core")) as test_client:
        yield test_client
    purge_cached_app()
    Variable.delete(state_variable_key("long-job"))


def _text(page: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def _rows(page: str) -> list[str]:
    table = page[page.index('id="timeline"') :]
    return re.findall(r"<tr[^>]*>(.*?)</tr>", table[table.index("<tbody>") :])


def test_a_long_history_is_folded_and_paged(client):
    response = client.get("/elasticgrid/jobs/long-job", headers=_token("viewer"))
    assert response.status_code == 200
    page = response.text
    assert len(page) < 300_000  # the 3,000 rows of before took 2.7 MB
    rows = _rows(page)
    assert len(rows) == ROWS_PER_PAGE
    pages = -(-ROWS // ROWS_PER_PAGE)
    assert f"page 1 of {pages} ({ROWS} rows)" in _text(page)
    # the newest run: eight holds alternating between the rules holding them back, one row
    newest = _text(rows[0])
    assert "held 8 times by cooldown and stabilisation" in newest
    assert "(8 records)" in newest
    run = f"{DECISIONS - 8}-{DECISIONS - 1}"
    assert f'href="/elasticgrid/jobs/long-job?run={run}#timeline"' in rows[0]
    # its link shows those eight decisions one by one, and the way back
    one_by_one = client.get(f"/elasticgrid/jobs/long-job?run={run}", headers=_token("viewer"))
    assert len(_rows(one_by_one.text)) == 8
    assert f"Records {run} one by one; all decisions ." in _text(one_by_one.text)
    # the oldest page ends with the first decision: a hold for want of samples
    oldest = client.get(f"/elasticgrid/jobs/long-job?page={pages}", headers=_token("viewer"))
    assert f"page {pages} of {pages}" in _text(oldest.text)
    assert "min_samples" in _text(_rows(oldest.text)[-1])
    assert 'href="/elasticgrid/jobs/long-job?page=1#timeline">newest</a>' in oldest.text
    # the chart of 3,000 decisions is drawn from a bounded number of points
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


def test_a_check_deep_in_the_history_opens_on_its_page(client):
    # run-11 is the 12th decision: the second lap's scale-up, on the last page
    url = "/elasticgrid/jobs/long-job?dag_id=audit_dag&run_id=run-11&task_id=scale_check"
    page = client.get(url, headers=_token("viewer")).text
    card = page[page.index("This check&#x27;s decision") : page.index(">Now<")]
    assert "scale_up" in card and "run-11" in card
    highlighted = re.findall(r'<tr class="highlight">(.*?)</tr>', page)
    assert len(highlighted) == 1 and "run-11" in highlighted[0]
    pages = -(-ROWS // ROWS_PER_PAGE)
    assert f"page {pages} of {pages}" in _text(page)
    # paging keeps the check on top
    assert "run_id=run-11&amp;task_id=scale_check&amp;map_index=-1&amp;page=1#timeline" in page
