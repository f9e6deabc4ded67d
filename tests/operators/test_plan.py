"""PlanPlacementOperator run as a real task on a real metadata DB."""

from __future__ import annotations

import pytest

from tests.airflow_support import run_dag

pytestmark = pytest.mark.airflow


def test_plan_uses_builtin_grid_without_connection(airflow_db, monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_ELASTICGRID_DEFAULT", raising=False)
    result = run_dag("plan_default_grid", run_conf={"nodes": 100})
    assert result.task_states == {"plan": "success"}
    placement = result.xcom("plan")
    assert placement["cost_per_hour"] == 302.8
    assert [(a["provider"], a["nodes"]) for a in placement["assignments"]] == [
        ("local", 8),
        ("aws", 64),
        ("gcp", 28),
    ]
