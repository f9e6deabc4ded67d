"""Links open inside the UI: the extra link and the plugin's views, also under a sub-path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from elasticgrid_provider.links import ScaleDecisionsLink, root_path, ui_path

TI_KEY = SimpleNamespace(dag_id="d", run_id="manual__2026-01-01T00:00:00+00:00", task_id="t")


def _link(job_name: str = "my-job", **key: object) -> str:
    ti_key = SimpleNamespace(**{**vars(TI_KEY), **key})
    return ScaleDecisionsLink().get_link(SimpleNamespace(job_name=job_name), ti_key=ti_key)


@pytest.mark.parametrize(
    ("base_url", "expected"),
    [
        # a page under the plugin route opens inside the UI; /elasticgrid/jobs/<job> would replace it
        ("", "/plugin/scale-decisions/elasticgrid/jobs/my-job?"),
        ("http://host:8080", "http://host:8080/plugin/scale-decisions/elasticgrid/jobs/my-job?"),
        (
            "https://host/airflow/",
            "https://host/airflow/plugin/scale-decisions/airflow/elasticgrid/jobs/my-job?",
        ),
    ],
)
def test_the_extra_link_opens_the_plugins_ui_route(monkeypatch, base_url, expected):
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", base_url)
    link = _link()
    assert link.startswith(expected)
    assert link.endswith("dag_id=d&run_id=manual__2026-01-01T00%3A00%3A00%2B00%3A00&task_id=t")


def test_the_extra_link_names_the_map_index_of_a_mapped_task(monkeypatch):
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "")
    assert _link(map_index=3).endswith("&task_id=t&map_index=3")
    assert "map_index" not in _link(map_index=-1)
    assert _link(job_name="{{ params.job }}") == ""


def test_the_ui_path_carries_the_base_urls_sub_path():
    assert root_path("https://host/airflow/") == "/airflow"
    assert root_path("http://host:8080") == root_path(None) == ""
    assert ui_path("/airflow", "/elasticgrid/jobs") == (
        "/airflow/plugin/scale-decisions/airflow/elasticgrid/jobs"
    )


SHOW_VIEWS = """
import json
from elasticgrid_provider.plugins.plugin import ElasticGridPlugin
print(json.dumps([view["href"] for view in ElasticGridPlugin.external_views]))
"""


@pytest.mark.parametrize(
    ("base_url", "prefix"), [("", ""), ("http://host:8080/airflow", "/airflow")]
)
def test_the_views_hrefs_carry_the_sub_path(base_url, prefix):
    environment = {**os.environ, "AIRFLOW__API__BASE_URL": base_url}
    result = subprocess.run(
        [sys.executable, "-c", SHOW_VIEWS],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    hrefs = json.loads(result.stdout.strip().splitlines()[-1])
    assert hrefs == [
        f"{prefix}/elasticgrid/jobs",
        f"{prefix}/elasticgrid/tasks/{{DAG_ID}}/{{TASK_ID}}/{{RUN_ID}}?map_index={{MAP_INDEX}}",
        f"{prefix}/elasticgrid/fleet",
    ]
