"""DAGs for the LaunchOperator tests: a real training job on the local engine."""

from __future__ import annotations

import sys
from pathlib import Path

from airflow.sdk import DAG

from elasticgrid_provider.operators import LaunchOperator, PlanPlacementOperator

TRAIN = Path(__file__).resolve().parents[2] / "example_dags" / "train_elastic.py"
TWO_LOCAL_PROVIDERS = [
    {"name": "onprem", "engine": "local", "max_nodes": 2, "cost_per_node_hour": 0.0, "spot": False},
    {"name": "cloud", "engine": "local", "region": "test-1", "max_nodes": 4,
     "cost_per_node_hour": 1.5, "spot": True},
]
ONE_FAILING_PROVIDER = [
    TWO_LOCAL_PROVIDERS[0],
    {"name": "fullcloud", "engine": "module=tests.fake_engines:NoCapacityEngine",
     "max_nodes": 4, "cost_per_node_hour": 1.0, "spot": True},
]
JOB = "{{ dag_run.conf['job_name'] }}"
NODES = "{{ dag_run.conf.get('nodes', 2) }}"
TRAIN_RUN = (
    f"{sys.executable} {TRAIN} --steps {{{{ dag_run.conf.get('steps', 4) }}}} "
    "--global-batch 2 --microbatch-seconds 0.02"
)
FAILING_RUN = f"{sys.executable} -c \"import sys; print('loading shard 7'); print('boom: corrupt batch'); sys.exit(3)\""


def launch_dag(dag_id: str, providers: list, run: str, **launch_arguments) -> DAG:
    """plan -> launch, with the launch arguments under test."""
    with DAG(dag_id=dag_id, schedule=None, catchup=False) as dag:
        plan = PlanPlacementOperator(task_id="plan", nodes=NODES, providers=providers)
        plan >> LaunchOperator(
            task_id="launch", job_name=JOB, run=run, placement=plan.output,
            recovery={"mode": "none"}, poll_interval=0.5, **launch_arguments,
        )
    return dag


launch_dag("launch_no_wait", TWO_LOCAL_PROVIDERS, TRAIN_RUN)
launch_dag("launch_and_wait", TWO_LOCAL_PROVIDERS, TRAIN_RUN, wait_for_completion=True)
launch_dag(
    "launch_and_wait_deferrable", TWO_LOCAL_PROVIDERS, TRAIN_RUN,
    wait_for_completion=True, deferrable=True,
)
launch_dag("launch_failing_job", TWO_LOCAL_PROVIDERS, FAILING_RUN, wait_for_completion=True)
launch_dag("launch_provider_fails", ONE_FAILING_PROVIDER, TRAIN_RUN)
