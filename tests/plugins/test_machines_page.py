"""The job page's Machines section on Airflow's real API app: a real local launch whose cloud
part carries the machines record the ec2 engine keeps (its documented shape)."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_machines import RECLAIMED, RUNNING, record_machines
from tests.cli.test_stop import launch
from tests.plugins.recorded import deadline_job
from tests.plugins.test_app import _delete, _store, _token

pytestmark = pytest.mark.airflow
JOB = "machine-job"


@pytest.fixture
def client(airflow_db, jobs_root: Path) -> Iterator[Any]:
    from airflow.api_fastapi.app import create_app, purge_cached_app
    from fastapi.testclient import TestClient

    _store(deadline_job(JOB))
    purge_cached_app()
    try:
        with TestClient(create_app(apps="core")) as test_client:
            yield test_client
    finally:
        purge_cached_app()
        _delete(JOB)  # the jobs_root fixture stops the job


def test_the_job_page_shows_each_parts_machines(client, jobs_root: Path) -> None:
    launch(jobs_root, JOB, 3)
    record_machines(jobs_root, JOB, f"{JOB}--cloud", [RUNNING, RECLAIMED])

    page = client.get(f"/elasticgrid/jobs/{JOB}", headers=_token("viewer"))

    assert page.status_code == 200
    text = html.unescape(re.sub(r"<[^>]+>", " ", page.text))
    assert " Machines " in text
    section = text[text.index(" Machines ") :]
    for word in ("part", "instance", "type", "market", "zone", "state", "launched"):
        assert f" {word} " in section
    cells = (f"{JOB}--cloud", RUNNING["instance_id"], "g5.xlarge", "spot", "us-east-1a", "running")
    assert re.search(r"\s+".join(map(re.escape, cells)) + r"\s", section)
    assert "terminated (reclaimed by the cloud)" in section
    assert "2026-01-01 00:00:00 UTC" in page.text  # the launch time in full, on hover

    data = client.get(f"/elasticgrid/api/jobs/{JOB}", headers=_token("viewer")).json()
    assert [row["instance_id"] for row in data["machines"]] == [
        RUNNING["instance_id"],
        RECLAIMED["instance_id"],
    ]
    assert data["machines"][1]["state"] == "terminated (reclaimed by the cloud)"
    assert data["errors"] == []


def test_a_job_without_machines_has_no_section_and_a_corrupt_record_is_one_line(
    client, jobs_root: Path
) -> None:
    launch(jobs_root, JOB, 2)
    page = client.get(f"/elasticgrid/jobs/{JOB}", headers=_token("viewer")).text
    assert 'id="machines"' not in page

    (jobs_root / f"{JOB}--onprem" / "machines.json").write_text("[]")
    data = client.get(f"/elasticgrid/api/jobs/{JOB}", headers=_token("viewer")).json()
    assert data["machines"] == []
    assert len(data["errors"]) == 1
    assert data["errors"][0].startswith("machines record ")
