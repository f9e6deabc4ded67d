"""elastic_fleet: two training jobs share one grid, each told what to do when it is full.

Both jobs run on the demo grid: 2 free on-prem nodes and 6 spot "cloud" ones, 8 in all,
on this machine's local iroh-tinker engine. Every plan names its job (``job_name``), so it
plans against the nodes the other job holds, and the grid's ledger never gives a node
twice:

* ``fleet-pretrain`` (priority 0) wants 6 nodes and can run on as few as 2
  (``min_nodes``). When the grid is short it takes what fits; its scale check then holds
  with rule ``capacity`` until nodes free up, and grows it into them.
* ``fleet-evaluate`` (priority 10) wants 4 nodes and waits for them (the default
  ``on_shortfall``), deferred to the triggerer. When pretrain holds them, it asks pretrain
  to shrink, never below pretrain's ``min_nodes``: pretrain's next check decides
  ``scale_down`` with rule ``preempted``, naming evaluate, and the re-plan and relaunch
  shrink it.

The two branches start at once, and either may plan first; either way the grid is never
over-subscribed and both jobs finish. ``elasticgrid fleet`` and the Fleet page show who
holds what, the queue, and the shrink requests; ``docs/fleet.md`` gives the rules.

Run it on a deployment, where both branches run at the same time. ``airflow dags test``
runs one task at a time, so a plan waiting for capacity would wait for a check that
cannot run until the plan ends.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

from airflow.sdk import DAG

from elasticgrid_provider.dag_builders import local_demo_grid, plan_and_launch, replan_and_relaunch
from elasticgrid_provider.sensors import ElasticScaleSensor

TRAIN_SCRIPT = Path(__file__).with_name("train_elastic.py")
GRID = local_demo_grid()  # 2 on-prem + 6 "cloud" nodes, one grid for both jobs
PRETRAIN, EVALUATE = "fleet-pretrain", "fleet-evaluate"


def training_run(steps: int) -> str:
    """The ranks' command: 8 micro-batches a step, queue-bound below 8 ranks."""
    return (
        f"{sys.executable} {TRAIN_SCRIPT} --steps {steps} --global-batch 8 --microbatch-seconds 0.1"
    )


# the low-priority job: elastic from 2 to 6 nodes, starts on what fits
PRETRAIN_PLAN = {"job_name": PRETRAIN, "min_nodes": 2, "on_shortfall": "take_what_fits"}
PRETRAIN_LAUNCH = {"job_name": PRETRAIN, "run": training_run(600), "recovery": {"mode": "none"}}
# the urgent job: waits for its 4 nodes in the triggerer, shrinking lower-priority jobs
EVALUATE_PLAN = {"job_name": EVALUATE, "priority": 10, "capacity_timeout": 3600, "deferrable": True}

with DAG(
    dag_id="elastic_fleet",
    schedule=None,
    catchup=False,
    max_active_runs=1,
    tags=["elasticgrid", "example"],
    doc_md=__doc__,
) as dag:
    pretrain = plan_and_launch(
        6,
        providers=GRID,
        plan_arguments=PRETRAIN_PLAN,
        plan_task_id="pretrain_plan",
        launch_task_id="pretrain_launch",
        **PRETRAIN_LAUNCH,
    )
    pretrain_check = ElasticScaleSensor(
        task_id="pretrain_check",
        job_name=PRETRAIN,
        providers=GRID,
        min_nodes=2,
        max_nodes=6,
        min_samples=3,
        window_size=5,
        startup_s=10,
        cooldown_s=120,
        poke_interval=5,
        mode="poke",  # checks this close: a reschedule under 15 s races the scheduler
        timeout=timedelta(minutes=30),
    )
    replan_and_relaunch(
        pretrain_check,
        providers=GRID,
        plan_arguments=PRETRAIN_PLAN,
        plan_task_id="pretrain_replan",
        launch_task_id="pretrain_relaunch",
        wait_for_completion=True,
        **PRETRAIN_LAUNCH,
    )
    pretrain.launch >> pretrain_check

    plan_and_launch(
        4,
        providers=GRID,
        plan_arguments=EVALUATE_PLAN,
        plan_task_id="evaluate_plan",
        launch_task_id="evaluate",
        job_name=EVALUATE,
        run=training_run(100),
        recovery={"mode": "none"},
        wait_for_completion=True,
        deferrable=True,
    )
