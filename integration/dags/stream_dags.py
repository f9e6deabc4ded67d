"""elastic_training's shape for a stream, checked twice: plan 2 -> launch -> a check that
grows the job -> re-plan and relaunch -> a check that shrinks it -> re-plan and relaunch,
waiting for the stream to end -> stop.

elastic_training itself checks once per run (its relaunch waits for the job to finish), so
a job that grows and then shrinks needs a second check: this DAG chains two, with the same
builders and training script (in its stream mode, ``--arrivals``: the run conf names the
file whose rate the test changes). Run by ``dag.test()`` (tests/test_stream_dag.py, which
loads it through tests/dags); the integration suite's deployment parses it beside
``train_elastic.py``.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

from airflow.sdk import DAG

from elasticgrid_provider.dag_builders import (
    local_demo_grid,
    plan_and_launch,
    replan_and_relaunch,
    stop_teardown,
)
from elasticgrid_provider.sensors import ElasticScaleSensor

DAG_ID = "stream_grows_and_shrinks"
# beside this file in a deployment's DAGs folder; in the source tree, in example_dags/
HERE = Path(__file__).with_name("train_elastic.py")
TRAIN = HERE if HERE.exists() else Path(__file__).parents[2] / "example_dags" / HERE.name
GRID = local_demo_grid(cloud_nodes=4, cloud_cost_per_node_hour=1.5, region="stream-1")
JOB = "{{ dag_run.conf['job_name'] }}"
# 12 micro-batches of 0.1 s per batch: 0.6 s of service at 2 ranks, 0.3 s at 4
STREAM_RUN = (
    f"{sys.executable} {TRAIN} --steps 100000 --global-batch 12 --microbatch-seconds 0.1 "
    "--arrivals {{ dag_run.conf['arrivals'] }}"
)
# the launch confirms the ranks after 1 s (they start fine)
LAUNCH = {"job_name": JOB, "run": STREAM_RUN, "recovery": {"mode": "none"}, "startup_grace_s": 1}
# a resize restarts local ranks in seconds; the checks look every second
CHECK = {
    "job_name": JOB,
    "providers": GRID,
    "min_nodes": 2,
    "max_nodes": 4,
    "min_samples": 3,
    "window_size": 8,
    "startup_s": 5,
    "cooldown_s": 5,
    "poke_interval": 1,
    "mode": "poke",
    "timeout": timedelta(minutes=4),
}

with DAG(dag_id=DAG_ID, schedule=None, catchup=False, tags=["integration"]) as dag:
    start = plan_and_launch(2, providers=GRID, plan_task_id="start_plan", **LAUNCH)
    grow_check = ElasticScaleSensor(task_id="grow_check", **CHECK)
    grow = replan_and_relaunch(
        grow_check, providers=GRID, plan_task_id="grow_plan", launch_task_id="grow", **LAUNCH
    )
    shrink_check = ElasticScaleSensor(task_id="shrink_check", **CHECK)
    shrink = replan_and_relaunch(
        shrink_check,
        providers=GRID,
        plan_task_id="shrink_plan",
        launch_task_id="shrink",
        wait_for_completion=True,
        poll_interval=1,
        **LAUNCH,
    )
    stop = stop_teardown(start)
    start.launch >> grow_check
    grow.launch >> shrink_check
    shrink.launch >> stop
