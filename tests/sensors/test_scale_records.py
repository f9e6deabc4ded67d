"""The records a scale check leaves: one XCom per check, a readable log line, the history."""

from __future__ import annotations

import pytest

from elasticgrid_provider.core.state import hold_run, state_variable_key
from tests.airflow_support import read_variable, run_dag

pytestmark = pytest.mark.airflow


def _xcom_keys(dag_id: str, run_id: str, task_id: str) -> set[str]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return set(
            session.scalars(
                select(XComModel.key).where(
                    XComModel.dag_id == dag_id,
                    XComModel.run_id == run_id,
                    XComModel.task_id == task_id,
                )
            )
        )


def test_each_check_leaves_one_record_and_logs_the_thresholds(airflow_db, jobs_root, capfd):
    run_dag("launch_queue_bound", {"job_name": "rec", "nodes": 2})
    first = run_dag("scale_check_cooldown", {"job_name": "rec"})
    assert first.task_states == {"scale_check": "success"}
    revision = read_variable(state_variable_key("rec"))["revision"]
    second = run_dag("scale_check_cooldown", {"job_name": "rec"})
    assert second.task_states == {"scale_check": "skipped"}
    for result in (first, second):
        # no duplicate ``decision`` key: the record is the return value, plus the extra link
        keys = _xcom_keys(result.dag_id, result.run_id, "scale_check")
        assert keys == {"return_value", "_link_ScaleDecisionsLink"}
    held = second.xcom("scale_check")
    assert held["context"]["readable"]["decided_at"].endswith("+00:00")
    assert held["context"]["map_index"] == -1  # the task tab looks the decision up by it
    assert [c["type"] for c in held["conditions"]] == [
        "AbleToScale",
        "ScalingActive",
        "ScalingLimited",
    ]
    assert held["context"]["readable"]["summary"].startswith("hold 2 -> 2; rule queue_bound")
    output = capfd.readouterr().out
    assert "Decision for job rec: scale_up 2 -> 4; rule queue_bound (target_queue_fraction=" in (
        output
    )
    assert "held by cooldown (cooldown_s=3600, scale_down_cooldown_s=3600)" in output
    state = read_variable(state_variable_key("rec"))
    # every check of the second run held by the cooldown: one entry, counted
    newest = state["history"][-1]
    assert (newest["action"], [h["rule"] for h in newest["held_by"]]) == ("hold", ["cooldown"])
    checks = state["revision"] - revision  # each check writes one revision
    assert hold_run(newest)["count"] == checks >= 1


def test_the_end_of_the_job_is_in_the_history(airflow_db, jobs_root):
    run_dag("launch_and_wait", {"job_name": "ends", "nodes": 2, "steps": 3})
    for _ in range(2):
        result = run_dag("scale_check_patient", {"job_name": "ends"})
        assert result.task_states == {"scale_check": "skipped"}
    history = read_variable(state_variable_key("ends"))["history"]
    assert history[-1]["rule"] == "job_ended"
    assert history[-1]["hold_run"]["count"] == 2  # two checks of the ended job, one entry
    assert history[-1]["context"]["dag_id"] == "scale_check_patient"
