"""elastic_training's shape for a stream, checked twice: plan 2 -> launch -> a check that
grows the job -> re-plan and relaunch -> a check that shrinks it -> re-plan and relaunch,
waiting for the stream to end -> stop (tests/test_stream_dag.py).

elastic_training itself checks once per run (its relaunch waits for the job to finish), so
a job that grows and then shrinks needs a second check: this DAG chains two, with the same
builders, grid and training script (in its stream mode, ``--arrivals``: the run conf names
the file whose rate the test changes)."""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG

from elasticgrid_provider.dag_builders import plan_and_launch, replan_and_relaunch, stop_teardown
from elasticgrid_provider.sensors import ElasticScaleSensor
from tests.dag_settings import JOB, PYTHON, QUICK_START, TRAIN
from tests.dag_settings import TWO_LOCAL_PROVIDERS as GRID

# 12 micro-batches of 0.1 s per batch: 0.6 s of service at 2 ranks, 0.3 s at 4
STREAM_RUN = (
    f"{PYTHON} {TRAIN} --steps 100000 --global-batch 12 --microbatch-seconds 0.1 "
    "--arrivals {{ dag_run.conf['arrivals'] }}"
)
LAUNCH = {"job_name": JOB, "run": STREAM_RUN, "recovery": {"mode": "none"}, **QUICK_START}
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

with DAG(dag_id="stream_grows_and_shrinks", schedule=None, catchup=False) as dag:
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
