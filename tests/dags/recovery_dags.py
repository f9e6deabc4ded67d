"""DAGs for the recovery tests: a job on spot capacity that gets reclaimed.

The grid maps ``onprem`` to the local engine and ``spot`` and ``backup`` to
:class:`tests.preemptible_engine.PreemptibleEngine`, which kills a part's
ranks ``FAKE_PREEMPT`` seconds after they start, or at the job's next step
(from the run's conf, e.g. ``{"preempt": "spot=7"}`` or ``"spot=step"``). A 2-node job runs as ``onprem 1 + spot 1``; when
``spot`` is lost, the cheapest rest is ``onprem 1 + backup 1``.

The pipeline is the one an author writes for scaling: check -> plan
(``nodes=check.output``) -> relaunch. Nothing in it is about recovery.
"""

from __future__ import annotations

from airflow.sdk import DAG

from elasticgrid_provider.dag_builders import plan_and_launch, replan_and_relaunch
from elasticgrid_provider.sensors import ElasticScaleSensor
from tests.dag_settings import JOB, NODES, PYTHON, TRAIN

PREEMPTIBLE = "module=tests.preemptible_engine:PreemptibleEngine"
RECOVERY_GRID = [
    {"name": "onprem", "engine": "local", "max_nodes": 1, "cost_per_node_hour": 0.0, "spot": False},
    {"name": "spot", "engine": PREEMPTIBLE, "max_nodes": 1, "cost_per_node_hour": 1.0},
    {"name": "backup", "engine": PREEMPTIBLE, "max_nodes": 1, "cost_per_node_hour": 2.0},
]
# the same, with a backup that takes its time to provision: a relaunch holds the lock longer
SLOW_BACKUP_GRID = [
    *RECOVERY_GRID[:2],
    {**RECOVERY_GRID[2], "engine": "module=tests.preemptible_engine:SlowProvisionEngine"},
]
RUN = (
    f"{PYTHON} {TRAIN} --steps {{{{ dag_run.conf.get('steps', 60) }}}} "
    "--global-batch 2 --microbatch-seconds 0.05"
)
ENVS = {
    "FAKE_PREEMPT": "{{ dag_run.conf.get('preempt', '') }}",
    "FAKE_PROVISION_S": "{{ dag_run.conf.get('provision_s', 0) }}",
}
CHECK = {
    "job_name": JOB,
    "min_nodes": 1,
    "max_nodes": 2,
    "min_samples": 1000,  # never scales: these checks are about recovery
    "poke_interval": 1,
    "timeout": 90,
    "max_recoveries": "{{ dag_run.conf.get('max_recoveries', 3) }}",
    "quarantine": "{{ dag_run.conf.get('quarantine', 1800) }}",
}


# the training job's launch (iroh-tinker's own restart off)
TRAINING = {"job_name": JOB, "run": RUN, "envs": ENVS, "recovery": {"mode": "none"}}


def check_and_relaunch(grid: list[dict], **relaunch_arguments) -> ElasticScaleSensor:
    """The scaling pipeline's tasks: check -> plan at the decided size -> relaunch.

    Returns the check, the first of the three, for an upstream task to precede.
    """
    check = ElasticScaleSensor(task_id="scale_check", providers=grid, **CHECK)
    replan_and_relaunch(
        check, providers=grid, plan_task_id="plan", **TRAINING, **relaunch_arguments
    )
    return check


with DAG(dag_id="recovery_launch", schedule=None, catchup=False):
    plan_and_launch(NODES, providers=RECOVERY_GRID, **TRAINING)

# on onprem and spot alone: a part lost while starting cannot be placed again by the launch
# (its grace outlasts the job's first step on a loaded machine: ``preempt: spot=step``)
with DAG(dag_id="recovery_launch_no_spare", schedule=None, catchup=False):
    plan_and_launch(NODES, providers=RECOVERY_GRID[:2], startup_grace_s=8, **TRAINING)

with DAG(dag_id="recovery_check", schedule=None, catchup=False):
    check_and_relaunch(RECOVERY_GRID, poll_interval=0.5)

with DAG(dag_id="recovery_check_and_finish", schedule=None, catchup=False):
    check_and_relaunch(RECOVERY_GRID, poll_interval=0.5, wait_for_completion=True)

# one process launches, checks and relaunches: the task that launched a rank reaps it (it is
# the ranks' subreaper), so only it sees a reclaimed rank gone; the relaunch on the slow backup
# holds the job's lock for FAKE_PROVISION_S seconds
with DAG(dag_id="recovery_launch_then_recover_slowly", schedule=None, catchup=False):
    start = plan_and_launch(
        NODES,
        providers=SLOW_BACKUP_GRID,
        plan_task_id="start_plan",
        launch_task_id="start",
        **TRAINING,
    )
    start.launch >> check_and_relaunch(SLOW_BACKUP_GRID)

with DAG(dag_id="recovery_check_only", schedule=None, catchup=False):
    ElasticScaleSensor(
        task_id="scale_check", providers=SLOW_BACKUP_GRID, **{**CHECK, "timeout": 3}, soft_fail=True
    )

# a launch whose spot part is reclaimed within its start-up grace: placed again without it
with DAG(dag_id="recovery_startup_loss", schedule=None, catchup=False):
    plan_and_launch(NODES, providers=RECOVERY_GRID, startup_grace_s=3, **TRAINING)
