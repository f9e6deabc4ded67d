"""DAGs for the StopJobOperator tests: the teardown pattern, and a stop on its own."""

from __future__ import annotations

from airflow.sdk import DAG, task

from elasticgrid_provider.dag_builders import plan_and_launch
from elasticgrid_provider.operators import StopJobOperator
from tests.dag_settings import JOB, NODES, QUICK_START, SLEEPING_RUN, TWO_LOCAL_PROVIDERS

with DAG(dag_id="stop_teardown", schedule=None, catchup=False):
    # the teardown pattern as the docs write it: launch >> checks >> stop.as_teardown(...)
    start = plan_and_launch(
        NODES,
        providers=TWO_LOCAL_PROVIDERS,
        job_name=JOB,
        run=SLEEPING_RUN,
        recovery={"mode": "none"},
        **QUICK_START,
    )

    @task
    def train_checks() -> None:
        """The training's checks, which fail."""
        raise RuntimeError("the evaluation loss is NaN")

    stop = StopJobOperator(task_id="stop", job_name=JOB)
    start.launch >> train_checks() >> stop.as_teardown(setups=start.launch)

with DAG(dag_id="stop_job", schedule=None, catchup=False):
    StopJobOperator(task_id="stop", job_name=JOB)
