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


@pytest.mark.parametrize("nodes", [0, -3])
def test_fewer_than_one_node_fails_the_task_in_one_sentence(airflow_db, capfd, caplog, nodes):
    result = run_dag("plan_default_grid", run_conf={"nodes": nodes})
    assert result.task_states == {"plan": "failed"}
    assert result.xcom("plan") is None
    captured = capfd.readouterr()
    output = captured.out + captured.err + caplog.text
    assert "AirflowFailException: " in output, output[-3000:]
    failure = output.split("AirflowFailException: ", 1)[1].splitlines()[0]
    assert failure == f"nodes must be at least 1, got {nodes}"


def test_a_decision_targeting_zero_nodes_is_rejected(airflow_db, capfd, caplog):
    result = run_dag("plan_from_decision", run_conf={"decision": {"target_nodes": 0}})
    assert result.task_states == {"plan": "failed"}
    captured = capfd.readouterr()
    output = captured.out + captured.err + caplog.text
    assert "AirflowFailException: nodes must be at least 1, got 0" in output


def test_a_request_refused_by_an_older_triggerer_fails_the_try_with_a_retry():
    """The trigger's ``refused`` event (a newer release wrote the request) is retried: the
    next try may defer to an upgraded triggerer."""
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    from elasticgrid_provider.operators import PlanPlacementOperator

    plan = PlanPlacementOperator(task_id="plan", nodes=2, job_name="waiter")
    reason = "capacity request schema_version 2 was written by a newer release ..."
    with pytest.raises(AirflowException, match=r"^capacity request schema_version 2") as failed:
        plan.execute_complete({}, {"status": "refused", "job": "waiter", "reason": reason})
    assert not isinstance(failed.value, AirflowFailException)
