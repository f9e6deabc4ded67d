"""DAGs for the hook/connection tests: no inline grid, everything from the connection."""

from __future__ import annotations

from airflow.sdk import DAG

from elasticgrid_provider.operators import LaunchOperator, PlanPlacementOperator
from tests.dag_settings import JOB, TRAIN_RUN

CONNECTION_NODES = "{{ dag_run.conf.get('nodes', 5) }}"

with DAG(dag_id="plan_from_connection", schedule=None, catchup=False):
    PlanPlacementOperator(task_id="plan", nodes=CONNECTION_NODES)

with DAG(dag_id="launch_from_connection", schedule=None, catchup=False):
    plan = PlanPlacementOperator(task_id="plan", nodes=CONNECTION_NODES)
    plan >> LaunchOperator(
        task_id="launch",
        job_name=JOB,
        run=TRAIN_RUN,
        placement=plan.output,
        recovery={"mode": "none"},
        wait_for_completion=True,
        poll_interval=0.5,
    )
