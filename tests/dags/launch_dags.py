"""DAGs for the LaunchOperator tests (and to start jobs for the sensor tests)."""

from __future__ import annotations

from airflow.sdk import DAG

from elasticgrid_provider.operators import LaunchOperator, PlanPlacementOperator
from tests.dag_settings import (
    FAILING_RUN,
    HALF_FAILING_RUN,
    JOB,
    NODES,
    ONE_FAILING_PROVIDER,
    QUEUE_BOUND_RUN,
    SLEEPING_RUN,
    TRAIN_RUN,
    TWO_LOCAL_PROVIDERS,
)


def launch_dag(dag_id: str, providers: list, run: str, **launch_arguments) -> DAG:
    """plan -> launch, with the launch arguments under test."""
    with DAG(dag_id=dag_id, schedule=None, catchup=False) as dag:
        plan = PlanPlacementOperator(task_id="plan", nodes=NODES, providers=providers)
        plan >> LaunchOperator(
            task_id="launch",
            job_name=JOB,
            run=run,
            placement=plan.output,
            recovery={"mode": "none"},
            poll_interval=0.5,
            **launch_arguments,
        )
    return dag


launch_dag("launch_no_wait", TWO_LOCAL_PROVIDERS, TRAIN_RUN)
launch_dag("launch_and_wait", TWO_LOCAL_PROVIDERS, TRAIN_RUN, wait_for_completion=True)
launch_dag(
    "launch_and_wait_deferrable",
    TWO_LOCAL_PROVIDERS,
    TRAIN_RUN,
    wait_for_completion=True,
    deferrable=True,
)
launch_dag("launch_failing_job", TWO_LOCAL_PROVIDERS, FAILING_RUN, wait_for_completion=True)
launch_dag("launch_failing_job_no_wait", TWO_LOCAL_PROVIDERS, FAILING_RUN)
launch_dag("launch_provider_fails", ONE_FAILING_PROVIDER, TRAIN_RUN)
launch_dag("launch_queue_bound", TWO_LOCAL_PROVIDERS, QUEUE_BOUND_RUN)
launch_dag("launch_sleeping", TWO_LOCAL_PROVIDERS, SLEEPING_RUN)
launch_dag("launch_half_failing", TWO_LOCAL_PROVIDERS, HALF_FAILING_RUN)
launch_dag("launch_queue_bound_two_procs", TWO_LOCAL_PROVIDERS, QUEUE_BOUND_RUN, procs_per_node=2)
