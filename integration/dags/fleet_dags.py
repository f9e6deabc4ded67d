"""Two jobs on one grid: the DAGs of the fleet suite (``integration/test_fleet.py``).

``it_fleet_w1`` runs every task on Celery worker w1 (queue ``w1``), ``it_fleet_w2`` on w2;
the suite triggers one of each at the same instant, so their plans race for the grid
from two workers. Each is the elastic pipeline of one job, built with the shared DAG
builders: plan -> launch -> scale check -> re-plan -> relaunch and wait. Every plan names
its job, so it plans against the nodes the other jobs hold (a fleet-aware plan); the grid
is the ``elasticgrid_default`` connection's (the suite gives it 4 ``local`` nodes).

A plan that does not fit waits polling in the worker on w1 and deferred to the
triggerer on w2. The run conf holds what a test varies: ``job_name``; ``nodes``,
``min_nodes``, ``max_nodes`` (the check's ceiling, default ``nodes``), ``priority`` and
``on_shortfall`` of the job; ``deadline`` (an ISO time: the check then counts the job's
``steps`` left against it); ``steps``, ``global_batch`` and ``microbatch_seconds`` of its
training run (``train_elastic.py``, copied beside this file); ``gate``, a file its ranks
wait for before their first step (``gated.py``: a test opens it once the grid shows what
it checks).
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

from airflow.sdk import DAG

from elasticgrid_provider.dag_builders import plan_and_launch, replan_and_relaunch
from elasticgrid_provider.sensors import ElasticScaleSensor

TRAIN = Path(__file__).with_name("train_elastic.py")
GATED = Path(__file__).with_name("gated.py")
JOB = "{{ dag_run.conf['job_name'] }}"
NODES = "{{ dag_run.conf['nodes'] }}"
MIN_NODES = "{{ dag_run.conf.get('min_nodes', 1) }}"
MAX_NODES = "{{ dag_run.conf.get('max_nodes', dag_run.conf['nodes']) }}"
PRIORITY = "{{ dag_run.conf.get('priority', 0) }}"
TRAIN_RUN = (
    f"{sys.executable} {GATED} {{{{ dag_run.conf.get('gate', '-') }}}} "
    f"{sys.executable} {TRAIN} --steps {{{{ dag_run.conf.get('steps', 40) }}}} "
    "--global-batch {{ dag_run.conf.get('global_batch', 4) }} "
    "--microbatch-seconds {{ dag_run.conf.get('microbatch_seconds', 0.02) }}"
)
LAUNCH = {"job_name": JOB, "run": TRAIN_RUN, "recovery": {"mode": "none"}}


def fleet_dag(dag_id: str, queue: str, *, deferrable: bool) -> DAG:
    """The fleet-aware pipeline of the run's job, every task on ``queue``."""
    plan = {
        "job_name": JOB,
        "priority": PRIORITY,
        "min_nodes": MIN_NODES,
        "on_shortfall": "{{ dag_run.conf.get('on_shortfall', 'wait') }}",
        "capacity_timeout": 240,  # a test that goes wrong fails with the holders named
        "poll_interval": 1,
        "deferrable": deferrable,
    }
    with DAG(
        dag_id=dag_id,
        schedule=None,
        catchup=False,
        tags=["integration", "fleet"],
        default_args={"queue": queue},
    ) as dag:
        start = plan_and_launch(NODES, plan_arguments=plan, **LAUNCH)
        check = ElasticScaleSensor(
            task_id="scale_check",
            job_name=JOB,
            priority=PRIORITY,
            min_nodes=MIN_NODES,
            max_nodes=MAX_NODES,
            # a job given a deadline counts its steps left against it
            deadline="{{ dag_run.conf.get('deadline', '') }}",
            total_steps="{{ dag_run.conf['steps'] if dag_run.conf.get('deadline') else '' }}",
            min_samples=3,
            window_size=4,
            mode="poke",
            poke_interval=2,
            timeout=timedelta(minutes=4),
        )
        start.launch >> check
        replan_and_relaunch(
            check, plan_arguments=plan, wait_for_completion=True, poll_interval=1, **LAUNCH
        )
    return dag


fleet_dag("it_fleet_w1", "w1", deferrable=False)
fleet_dag("it_fleet_w2", "w2", deferrable=True)
