"""DAGs the integration suite drives through the REST API, on a CeleryExecutor deployment.

Every DAG takes its job name (and the knobs the test needs) from the run
conf. ``queue="w1"``/``queue="w2"`` routes a task to one of the two Celery
workers. Copied into the deployment's DAGs folder beside the example DAGs
and ``train_elastic.py``.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG

from elasticgrid_provider.dag_builders import PlannedLaunch, local_demo_grid, plan_and_launch
from elasticgrid_provider.operators import LaunchOperator, PlanPlacementOperator
from elasticgrid_provider.sensors import ElasticScaleSensor
from elasticgrid_provider.triggers.job import MIN_DEFERRAL_S

TRAIN = Path(__file__).with_name("train_elastic.py")
GRID = local_demo_grid(cloud_nodes=4, cloud_cost_per_node_hour=1.5, region="it-1")
JOB = "{{ dag_run.conf['job_name'] }}"
NODES = "{{ dag_run.conf.get('nodes', 2) }}"
# 4 micro-batches per step: at 2 ranks half of each step waits for a worker (queue-bound)
TRAIN_RUN = (
    f"{sys.executable} {TRAIN} --steps {{{{ dag_run.conf.get('steps', 40) }}}} "
    "--global-batch 4 --microbatch-seconds {{ dag_run.conf.get('microbatch_seconds', 0.05) }}"
)
SLEEPING_RUN = (
    f"{sys.executable} -c \"import time; time.sleep({{{{ dag_run.conf.get('sleep_s', 300) }}}})\""
)
NO_RECOVERY = {"mode": "none"}


def launch_job(run: str, **launch_arguments: Any) -> PlannedLaunch:
    """plan -> launch of the run's job on the grid, with the launch arguments under test."""
    return plan_and_launch(
        NODES, providers=GRID, job_name=JOB, run=run, recovery=NO_RECOVERY, **launch_arguments
    )


def launch_dag(dag_id: str, run: str, **launch_arguments: Any) -> DAG:
    """A DAG of plan -> launch, with the launch arguments under test."""
    with DAG(dag_id=dag_id, schedule=None, catchup=False, tags=["integration"]) as dag:
        launch_job(run, **launch_arguments)
    return dag


# a deferrable launch that waits for its (short) job in the triggerer
launch_dag("it_deferrable_launch", TRAIN_RUN, wait_for_completion=True, deferrable=True)

# a launch on worker w1 that waits in the worker: the one the suite kills with -9;
# its retry must attach to the running job, not start a second copy
launch_dag(
    "it_launch_on_w1",
    TRAIN_RUN,
    wait_for_completion=True,
    poll_interval=1,
    queue="w1",
    retries=2,
    retry_delay=timedelta(seconds=2),
)

# a job named like an envs value whose ranks print their environment 6 s after they
# started, then fail: the launch's task log on w1 shows what the masker left of each value
PRINTED = "MODE CHAOS_ITER HF_TOKEN DB_URL DATA_URL RUN_SIGNATURE"
launch_dag(
    "it_printing_envs",
    f'{sys.executable} -c "import os, sys, time; time.sleep(6); '
    f"print(' '.join(k + '=' + os.environ[k] for k in '{PRINTED}'.split())); sys.exit(3)\"",
    envs={
        "MODE": "train",
        "CHAOS_ITER": "resize",
        "HF_TOKEN": "{{ dag_run.conf['hf_token'] }}",
        "DB_URL": "postgres://u:pw@h/db",
        "DATA_URL": "{{ dag_run.conf['data_url'] }}",
        "RUN_SIGNATURE": "{{ dag_run.conf['signature'] }}",
    },
    secret_envs=["RUN_SIGNATURE"],
    wait_for_completion=True,
    poll_interval=1,
    startup_grace_s=1,
    queue="w1",  # its task log is in w1's folder
    retries=0,
)


def scale_check(**arguments: Any) -> ElasticScaleSensor:
    """A check of the run's job on the grid: 1 to 4 nodes, a decision after 3 samples."""
    return ElasticScaleSensor(
        task_id="scale_check",
        job_name=JOB,
        providers=GRID,
        min_nodes=1,
        max_nodes=4,
        min_samples=3,
        window_size=4,
        **arguments,
    )


with DAG(dag_id="it_deferrable_sensor", schedule=None, catchup=False, tags=["integration"]):
    start = launch_job(TRAIN_RUN)
    start.launch >> scale_check(
        deferrable=True,
        poke_interval=2,  # below MIN_DEFERRAL_S: the sensor checks in the worker
        timeout=timedelta(minutes=3),
    )

with DAG(dag_id="it_deferred_sensor", schedule=None, catchup=False, tags=["integration"]):
    # a job that writes no samples: the first check holds and really defers (the test
    # writes the samples while the sensor waits in the triggerer)
    start = launch_job(SLEEPING_RUN)
    start.launch >> scale_check(
        deferrable=True,
        poke_interval=MIN_DEFERRAL_S,  # long enough to defer safely: waits in the triggerer
        timeout=timedelta(minutes=4),
        queue="w1",  # its task log is in w1's folder
    )

with DAG(dag_id="it_check_on_w2", schedule=None, catchup=False, tags=["integration"]):
    # reads the state of a job launched by it_launch_on_w1, on the other worker
    scale_check(mode="poke", poke_interval=2, timeout=timedelta(minutes=3), queue="w2")


class DescriptorRecordingLaunch(LaunchOperator):
    """A LaunchOperator that first records, to a file, what its task process has open.

    ``/proc/self/fd`` of the task process (run by Airflow's task supervisor) as
    ``{fd: link target}``; the suite compares the ranks' descriptors with it
    (a rank must inherit none of the task's sockets or pipes).
    """

    def execute(self, context: Any) -> Any:
        """Record the descriptors and the task's pid, then launch as usual."""
        descriptors = {}
        for fd in os.listdir("/proc/self/fd"):
            try:
                descriptors[fd] = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
        record = {"pid": os.getpid(), "ppid": os.getppid(), "descriptors": descriptors}
        Path(context["dag_run"].conf["probe_file"]).write_text(json.dumps(record))
        return super().execute(context)


with DAG(dag_id="it_descriptor_probe", schedule=None, catchup=False, tags=["integration"]):
    probe_plan = PlanPlacementOperator(task_id="plan", nodes=NODES, providers=GRID, queue="w2")
    probe_plan >> DescriptorRecordingLaunch(
        task_id="launch",
        job_name=JOB,
        run=SLEEPING_RUN,
        placement=probe_plan.output,
        recovery=NO_RECOVERY,
        queue="w2",
    )
