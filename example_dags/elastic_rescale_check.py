"""elastic_rescale_check: every 10 minutes, check a running job and resize it if needed.

**Starting the job it watches.** Trigger this DAG once with
``{"launch": true}`` in the run conf (add ``"job_name"`` to pick another
job than ``elastic-rescale-demo``): that run plans 2 nodes and launches the
job, which keeps running between runs. Every later run (scheduled, or
triggered without ``launch``) checks that job. A run that finds no job to
check (never launched, or already ended) is skipped with a message saying
so and how to start it, instead of failing.

Each run is a separate set of task instances, possibly on different
workers: the window, the step-log cursors, the cooldown clock and the
decision history live in the job's state Variable, so a run continues where
the previous one stopped. A run whose check holds until its timeout is
skipped (``soft_fail``), and so is its resize; a run that decides re-plans
at the target size and resizes the job (LaunchOperator attaches when the
size did not change, so a retry never starts a second copy).

**Lost capacity.** When the spot provider reclaims its nodes (a part
failed, or ranks down), the same check decides ``recover``: it quarantines
that provider for ``quarantine`` seconds, and plan -> resize relaunch the
job from its checkpoint on the rest of the grid. Past ``max_recoveries``
within ``recovery_window``, or with no capacity left, the check stops what is
left and fails with one sentence.
"""

from __future__ import annotations

import logging
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from elasticgrid_provider.dag_builders import local_demo_grid, plan_and_launch, replan_and_relaunch
from elasticgrid_provider.sensors import ElasticScaleSensor

TRAIN_SCRIPT = Path(__file__).with_name("train_elastic.py")
# 2 free on-prem nodes and 6 spot "cloud" ones, all on this machine's local engine
DEMO_GRID = local_demo_grid()
# its own job: elastic_training's default job is "elastic-demo"
DEFAULT_JOB_NAME = "elastic-rescale-demo"
JOB_NAME = "{{ params.job_name }}"
RUN = f"{sys.executable} {TRAIN_SCRIPT} --steps 600 --global-batch 4 --microbatch-seconds 0.2"
START_NODES = 2
# what the start and every resize share: the job and its command
LAUNCH = {
    "job_name": JOB_NAME,
    "run": RUN,
    "recovery": {"mode": "none"},  # a lost part is the scale check's to recover
}

with DAG(
    dag_id="elastic_rescale_check",
    schedule=timedelta(minutes=10),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["elasticgrid", "example"],
    doc_md=__doc__,
    params={
        "job_name": Param(DEFAULT_JOB_NAME, type="string", description="the job to check"),
        "launch": Param(
            False, type="boolean", description="start the job (2 nodes) instead of checking it"
        ),
    },
) as dag:

    @task.branch(task_id="find_job")
    def find_job(params: dict[str, Any] | None = None) -> str:
        """Start the job (``launch``), check it when it runs, or skip the run saying why."""
        from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook
        from elasticgrid_provider.shared_root import unshared_jobs_root_message

        job_name = str((params or {})["job_name"])
        if (params or {}).get("launch"):
            return "start_plan"
        hook = ElasticGridHook()
        snapshot = hook.job_store.job_snapshot(job_name)
        if snapshot is None:
            unshared = unshared_jobs_root_message(job_name, hook.jobs_root)
            if unshared:
                raise AirflowFailException(unshared)
            reason = f"job {job_name!r} was never launched under {hook.jobs_root}"
        elif snapshot.status not in ("running", "failed"):  # a failed part: the check recovers
            reason = f"job {job_name!r} is {snapshot.status}"
        else:
            return "scale_check"
        message = (
            f"{reason}, so there is nothing to check; "
            'trigger elastic_rescale_check with {"launch": true} to start it'
        )
        logging.getLogger(__name__).warning("%s", message)  # readable in the task log
        raise AirflowSkipException(message)

    # started once (a run with "launch"): plan START_NODES nodes and launch the job
    start = plan_and_launch(
        START_NODES,
        providers=DEMO_GRID,
        plan_task_id="start_plan",
        launch_task_id="start",
        **LAUNCH,
    )
    scale_check = ElasticScaleSensor(
        task_id="scale_check",
        job_name=JOB_NAME,
        providers=DEMO_GRID,
        min_nodes=2,
        max_nodes=8,
        target_step_s=1.0,
        # what one resize costs in no progress: stop, relaunch, load the checkpoint (a
        # long-running job's checkpoint takes longer to save and load than the demo's)
        startup_s=60,
        cooldown_s=600,
        scale_down_cooldown_s=1800,
        # lost capacity: at most 3 recoveries an hour; a provider that lost nodes sits out 30 min
        max_recoveries=3,
        recovery_window=timedelta(hours=1),
        quarantine=timedelta(minutes=30),
        poke_interval=60,
        timeout=timedelta(minutes=8),
        soft_fail=True,
    )
    # a decision re-plans at the decided size and resizes the job (attaches when unchanged)
    resize = replan_and_relaunch(
        scale_check, providers=DEMO_GRID, plan_task_id="plan", launch_task_id="resize", **LAUNCH
    )
    find_job() >> [start.plan, scale_check]
    start.plan >> start.launch
    scale_check >> resize.plan >> resize.launch
