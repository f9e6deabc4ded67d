"""A stream run for real: the DAG of elastic_training's shape with two checks
(integration/dags/stream_dags.py) launches ``train_elastic.py --arrivals`` (real ranks
serving a stream whose rate this test changes) at 2 nodes; the job grows when the rate
rises and shrinks after it falls, and each resize's record explains it (DemandCovered, the
restart trade-off)."""

from __future__ import annotations

import pytest

from tests.airflow_support import run_dag
from tests.job_processes import stop_job_processes
from tests.stream_load import changing_load, check_decisions, served_at

pytestmark = [pytest.mark.airflow, pytest.mark.long]

JOB = "stream-rate"


def test_a_stream_grows_when_its_rate_rises_and_shrinks_after_it_falls(
    airflow_db, jobs_root, tmp_path
):
    rates = tmp_path / "rates"
    try:
        with changing_load(jobs_root, JOB, rates) as failures:
            result = run_dag("stream_grows_and_shrinks", {"job_name": JOB, "arrivals": str(rates)})
    finally:
        stop_job_processes(JOB)
    assert not failures, failures
    assert set(result.task_states.values()) == {"success"}, result.task_states
    nodes = served_at(jobs_root, JOB)
    check_decisions(result.xcom("grow_check"), result.xcom("shrink_check"), nodes)
    assert result.xcom("shrink")["status"] == "done"
