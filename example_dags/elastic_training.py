"""elastic_training: plan -> launch -> scale check -> re-plan -> relaunch -> wait.

Runs on the embedded default: the local iroh-tinker engine, with a grid of
two providers that both map to it (a free on-prem pool of 2 nodes and a
spot "cloud" pool), so a resize from 2 to 4 nodes becomes a real two-part
job. The training job (``train_elastic.py`` beside this file) is queue-bound
at 2 ranks: each step has 4 micro-batches and each rank takes one at a
time, so half of every step is spent waiting for a worker. The scale check
reads the job's step log, decides ``scale_up`` 2 -> 4, the placement is
re-planned, and the job is relaunched at 4 ranks, resuming from its
checkpoint, where the wait all but disappears.

**Teardown.** ``stop`` (a ``StopJobOperator``, the teardown of the first launch)
runs once everything else is done, whatever happened: when the check or the
relaunch fails, it stops every part of the job, so nothing keeps running (or
costing) after the run; after a job that finished, it has nothing left to stop.

Trigger with ``{"job_name": ..., "steps": ...}`` in the run conf to change
the defaults. ``{"grid": "connection"}`` runs on the grid of the
``elasticgrid_default`` connection instead of the demo grid (remote SSH hosts,
for example), and ``{"python": ...}`` names the interpreter the ranks run
with there. The ranks start in this file's folder (the launch's ``workdir``,
which the SSH engine syncs to each host), so the script is named relatively.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path

from airflow.sdk import DAG, Param

from elasticgrid_provider.dag_builders import (
    local_demo_grid,
    plan_and_launch,
    replan_and_relaunch,
    stop_teardown,
)
from elasticgrid_provider.sensors import ElasticScaleSensor

TRAIN_SCRIPT = Path(__file__).with_name("train_elastic.py")
# the demo grid (2 free on-prem nodes, 6 spot "cloud" ones, all on this machine), or
# nothing (the connection's grid) when the run asks for it
GRID = "{% if params.grid == 'demo' %}" + json.dumps(local_demo_grid()) + "{% endif %}"
JOB_NAME = "{{ dag_run.conf.get('job_name', 'elastic-demo') }}"
RUN = (
    f"{{{{ params.python }}}} {TRAIN_SCRIPT.name} "
    "--steps {{ dag_run.conf.get('steps', 60) }} --global-batch 4 --microbatch-seconds 0.2"
)
# what the first launch and the relaunch share: the job, and how and where its ranks start
LAUNCH = {
    "job_name": JOB_NAME,
    "run": RUN,
    "workdir": str(TRAIN_SCRIPT.parent),
    "recovery": {"mode": "none"},  # a lost part is the scale check's to recover
}
PARAMS = {
    "grid": Param("demo", enum=["demo", "connection"], description="where the nodes run"),
    "python": Param(sys.executable, type="string", description="the ranks' interpreter"),
}

with DAG(
    dag_id="elastic_training",
    schedule=None,
    catchup=False,
    max_active_runs=1,
    tags=["elasticgrid", "example"],
    doc_md=__doc__,
    params=PARAMS,
) as dag:
    # plan 2 nodes over the grid, and start the job on that placement
    start = plan_and_launch(2, providers=GRID, **LAUNCH)
    scale_check = ElasticScaleSensor(
        task_id="scale_check",
        job_name=JOB_NAME,
        providers=GRID,
        min_nodes=2,
        max_nodes=4,
        min_samples=3,
        window_size=5,
        target_step_s=1.0,
        # a resize here stops the local ranks and restarts them from the checkpoint: about
        # 10 s of no progress (on a cloud, with provisioning, minutes); 0 would make it free
        startup_s=10,
        cooldown_s=120,
        poke_interval=2,
        mode="poke",  # checks this close: a reschedule under 15 s races the scheduler
        timeout=timedelta(minutes=3),
    )
    # re-plan at the size the check decides, relaunch at it and wait for the job to finish
    resize = replan_and_relaunch(
        scale_check, providers=GRID, wait_for_completion=True, poll_interval=1, **LAUNCH
    )
    # the teardown: whatever the check and the relaunch did, nothing of the job is left running
    stop = stop_teardown(start)
    start.plan >> start.launch >> scale_check >> resize.plan >> resize.launch >> stop
