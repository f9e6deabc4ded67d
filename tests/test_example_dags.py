"""The scheduled example DAG, run for real against a job that keeps running between runs."""

from __future__ import annotations

import pytest

from tests.airflow_support import run_dag
from tests.job_processes import wait_for_lines

pytestmark = pytest.mark.airflow


def test_elastic_rescale_check_resizes_a_queue_bound_job(airflow_db, jobs_root):
    run_dag("launch_queue_bound", {"job_name": "nightly", "nodes": 2})
    # a scheduled check finds a job that has been running for a while: wait for its first steps
    wait_for_lines(jobs_root / "nightly--onprem" / "steps.jsonl", 3)
    result = run_dag("elastic_rescale_check", {"job_name": "nightly"})
    assert result.task_states == {"scale_check": "success", "plan": "success", "resize": "success"}
    decision = result.xcom("scale_check")
    assert (decision["action"], decision["current_nodes"], decision["target_nodes"]) == (
        "scale_up",
        2,
        4,
    )
    resized = result.xcom("resize")
    assert resized["nodes"] == 4 and resized["status"] == "running"
