"""DAGs for the hook/connection tests: no inline grid, everything from the connection."""

from __future__ import annotations

from airflow.sdk import DAG

from elasticgrid_provider.dag_builders import plan_and_launch
from elasticgrid_provider.operators import LaunchOperator, PlanPlacementOperator
from elasticgrid_provider.sensors import ElasticScaleSensor
from tests.dag_settings import JOB, SLEEPING_RUN, TRAIN_RUN, TWO_LOCAL_PROVIDERS

CONNECTION_NODES = "{{ dag_run.conf.get('nodes', 5) }}"

with DAG(dag_id="plan_from_connection", schedule=None, catchup=False):
    PlanPlacementOperator(task_id="plan", nodes=CONNECTION_NODES)

with DAG(dag_id="launch_from_connection", schedule=None, catchup=False):
    plan_and_launch(
        CONNECTION_NODES,
        job_name=JOB,
        run=TRAIN_RUN,
        recovery={"mode": "none"},
        wait_for_completion=True,
        poll_interval=0.5,
    )

# an explicit connection id that names no connection: every task must fail, none may fall back
MISSING_CONNECTION = "elasticgrid_typo"

with DAG(dag_id="plan_with_missing_connection", schedule=None, catchup=False):
    PlanPlacementOperator(
        task_id="plan", nodes=CONNECTION_NODES, elasticgrid_conn_id=MISSING_CONNECTION
    )

with DAG(dag_id="plan_inline_grid_without_connection", schedule=None, catchup=False):
    PlanPlacementOperator(task_id="plan", nodes=CONNECTION_NODES, providers=TWO_LOCAL_PROVIDERS)

with DAG(dag_id="launch_with_missing_connection", schedule=None, catchup=False):
    plan = PlanPlacementOperator(
        task_id="plan", nodes=CONNECTION_NODES, providers=TWO_LOCAL_PROVIDERS
    )
    plan >> LaunchOperator(
        task_id="launch",
        job_name=JOB,
        run=SLEEPING_RUN,
        placement=plan.output,
        recovery={"mode": "none"},
        elasticgrid_conn_id=MISSING_CONNECTION,
    )

with DAG(dag_id="scale_check_with_missing_connection", schedule=None, catchup=False):
    ElasticScaleSensor(
        task_id="scale_check",
        job_name=JOB,
        poke_interval=1,
        timeout=5,
        soft_fail=True,
        providers=TWO_LOCAL_PROVIDERS,
        elasticgrid_conn_id=MISSING_CONNECTION,
    )
