"""ElasticScaleSensor on a real metadata DB, checking real local iroh-tinker jobs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from elasticgrid_provider.core.state import state_variable_key
from tests.airflow_support import read_variable, run_dag

pytestmark = pytest.mark.airflow


def _state(job: str) -> dict:
    return read_variable(state_variable_key(job))


def _wait_for_lines(path: Path, count: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= count:
            return
        time.sleep(0.2)
    raise AssertionError(f"{path} did not reach {count} lines in {timeout}s")


def test_a_queue_bound_job_is_scaled_up_and_relaunched_larger(airflow_db, jobs_root):
    launch = run_dag("launch_queue_bound", {"job_name": "grow", "nodes": 2})
    assert launch.task_states["launch"] == "success"
    result = run_dag("scale_up_then_resize", {"job_name": "grow"})
    assert result.task_states == {"scale_check": "success", "plan": "success", "resize": "success"}
    decision = result.xcom("scale_check")
    assert (decision["action"], decision["current_nodes"], decision["target_nodes"]) == (
        "scale_up", 2, 4
    )
    assert decision["rule"] == "queue_bound"
    assert decision["signals"]["queue_fraction"] >= 0.2
    assert "waiting for a worker" in decision["reason"]
    assert decision["context"]["proposed_cost_per_hour"] == 3.0
    resized = result.xcom("resize")
    assert resized["nodes"] == 4
    assert [(part["provider"], part["nodes"]) for part in resized["parts"]] == [
        ("onprem", 2), ("cloud", 2)
    ]
    state = _state("grow")
    assert state["schema_version"] == 1
    assert state["history"][-1]["action"] == "scale_up"
    assert state["cooldown"]["last_action"] == "scale_up"
