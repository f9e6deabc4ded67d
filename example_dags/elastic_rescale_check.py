"""elastic_rescale_check: every 10 minutes, check a running job and resize it if needed.

Each run is a separate set of task instances, possibly on different
workers: the window, the step-log cursors, the cooldown clock and the
decision history live in the job's state Variable, so a run continues where
the previous one stopped. A run whose check holds until its timeout is
skipped (``soft_fail``), and so is its resize; a run that decides re-plans
at the target size and resizes the job (LaunchOperator attaches when the
size did not change, so a retry never starts a second copy).
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG

from elasticgrid_provider.operators import LaunchOperator, PlanPlacementOperator
from elasticgrid_provider.sensors import ElasticScaleSensor

TRAIN_SCRIPT = Path(__file__).with_name("train_elastic.py")
DEMO_GRID = [
    {"name": "onprem", "engine": "local", "max_nodes": 2, "cost_per_node_hour": 0.0, "spot": False},
    {
        "name": "cloud",
        "engine": "local",
        "region": "demo-1",
        "max_nodes": 6,
        "cost_per_node_hour": 1.2,
        "spot": True,
    },
]
JOB_NAME = "{{ dag_run.conf.get('job_name', 'elastic-demo') }}"
RUN = f"{sys.executable} {TRAIN_SCRIPT} --steps 600 --global-batch 4 --microbatch-seconds 0.2"

with DAG(
    dag_id="elastic_rescale_check",
    schedule=timedelta(minutes=10),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["elasticgrid", "example"],
    doc_md=__doc__,
) as dag:
    scale_check = ElasticScaleSensor(
        task_id="scale_check",
        job_name=JOB_NAME,
        providers=DEMO_GRID,
        min_nodes=2,
        max_nodes=8,
        target_step_s=1.0,
        cooldown_s=600,
        scale_down_cooldown_s=1800,
        poke_interval=60,
        timeout=timedelta(minutes=8),
        soft_fail=True,
    )
    plan = PlanPlacementOperator(task_id="plan", nodes=scale_check.output, providers=DEMO_GRID)
    resize = LaunchOperator(
        task_id="resize",
        job_name=JOB_NAME,
        run=RUN,
        placement=plan.output,
        recovery={"mode": "none"},
    )
    scale_check >> plan >> resize
