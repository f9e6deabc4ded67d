"""DAGs for the scale checks on a shared grid: real local jobs on one grid of 4 nodes.

The jobs are launched by ``fleet_launch_*`` and checked by ``fleet_scale_check``, one check
per run on handed-in samples; its policy, priority, deadline and remaining work come from
the run's conf, so one DAG serves every job of a test.
"""

from __future__ import annotations

from airflow.sdk import DAG

from elasticgrid_provider.dag_builders import plan_and_launch
from elasticgrid_provider.sensors import ElasticScaleSensor
from tests.dag_settings import JOB, NODES, QUICK_START, SLEEPING_RUN, TRAIN_RUN

# one provider of 4 nodes on the local engine: every job of a test shares it
FLEET_GRID = [
    {"name": "local", "engine": "local", "max_nodes": 4, "cost_per_node_hour": 0.0, "spot": False}
]


def fleet_launch(dag_id: str, run: str) -> None:
    """plan -> launch a job of ``conf['nodes']`` nodes on the shared grid."""
    with DAG(dag_id=dag_id, schedule=None, catchup=False):
        plan_and_launch(
            NODES,
            providers=FLEET_GRID,
            job_name=JOB,
            run=run,
            recovery={"mode": "none"},
            poll_interval=0.5,
            **QUICK_START,
        )


fleet_launch("fleet_launch_sleeping", SLEEPING_RUN)
fleet_launch("fleet_launch_finishing", TRAIN_RUN)

with DAG(dag_id="fleet_scale_check", schedule=None, catchup=False):
    # timeout 0: exactly one check per run (a hold ends it skipped, its record in XCom)
    ElasticScaleSensor(
        task_id="scale_check",
        job_name=JOB,
        providers=FLEET_GRID,
        samples="{{ dag_run.conf.get('samples', []) | tojson }}",
        policy="{{ dag_run.conf.get('policy', {}) | tojson }}",
        priority="{{ dag_run.conf.get('priority', 0) }}",
        deadline="{{ dag_run.conf.get('deadline', '') }}",
        remaining_steps="{{ dag_run.conf.get('remaining_steps', '') }}",
        poke_interval=1,
        timeout=0,
        soft_fail=True,
    )
