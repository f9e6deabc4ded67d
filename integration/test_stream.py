"""A stream on the real deployment: the stream DAG (integration/dags/stream_dags.py) runs
``train_elastic.py --arrivals`` at 2 nodes through the scheduler and the Celery workers;
this test raises the rate (the job grows to 4) and lowers it (it shrinks to 2), and each
resize's record explains it (tests/stream_load.py)."""

from __future__ import annotations

from integration.dags.stream_dags import DAG_ID
from integration.deployment import Deployment
from tests.stream_load import changing_load, check_decisions, served_at

JOB = "it-stream"


def test_a_stream_grows_when_its_rate_rises_and_shrinks_after_it_falls(deployment: Deployment):
    deployment.wait_for_dags([DAG_ID])
    rates = deployment.jobs_root / "it-stream-rates"
    with changing_load(deployment.jobs_root, JOB, rates) as failures:
        run_id = deployment.trigger(DAG_ID, {"job_name": JOB, "arrivals": str(rates)})
        state = deployment.wait_for_run(DAG_ID, run_id, timeout=300)
    states = deployment.task_states(DAG_ID, run_id)
    assert not failures, failures
    assert state == "success", (states, deployment.diagnostics())
    assert set(states.values()) == {"success"}
    grew = deployment.xcom(DAG_ID, run_id, "grow_check")
    shrank = deployment.xcom(DAG_ID, run_id, "shrink_check")
    check_decisions(grew, shrank, served_at(deployment.jobs_root, JOB))
    assert deployment.xcom(DAG_ID, run_id, "shrink")["status"] == "done"
