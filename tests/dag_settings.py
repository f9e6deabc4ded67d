"""What the test DAGs share: the training script, the grid and the run commands.

Both providers of the grid map to the local iroh-tinker engine, so a
placement over both is a real two-part job on this machine.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from elasticgrid_provider.dag_builders import local_demo_grid, plan_and_launch, replan_and_relaunch

TRAIN = Path(__file__).resolve().parents[1] / "example_dags" / "train_elastic.py"
# the same path in a test worker (sys.executable .venv/bin/python) and in an `airflow`
# process (.venv/bin/python3, the script's shebang): a job launched by either has the same
# run command, so the other can attach to it
PYTHON = str(Path(sys.executable).with_name("python3"))
TWO_LOCAL_PROVIDERS = local_demo_grid(cloud_nodes=4, cloud_cost_per_node_hour=1.5, region="test-1")
ONE_FAILING_PROVIDER = [
    TWO_LOCAL_PROVIDERS[0],
    {
        "name": "fullcloud",
        "engine": "module=tests.fake_engines:NoCapacityEngine",
        "max_nodes": 4,
        "cost_per_node_hour": 1.0,
        "spot": True,
    },
]
JOB = "{{ dag_run.conf['job_name'] }}"
NODES = "{{ dag_run.conf.get('nodes', 2) }}"
TRAIN_RUN = (
    f"{PYTHON} {TRAIN} --steps {{{{ dag_run.conf.get('steps', 4) }}}} "
    "--global-batch 2 --microbatch-seconds 0.02"
)
# 4 micro-batches per step: at 2 ranks half of each step waits for a worker
QUEUE_BOUND_RUN = f"{PYTHON} {TRAIN} --steps 400 --global-batch 4 --microbatch-seconds 0.05"
FAILING_RUN = (
    f"{PYTHON} -c \"import sys; print('loading shard 7'); "
    "print('boom: corrupt batch'); sys.exit(3)\""
)
# for launches of jobs that start fine: the launch confirms their ranks after 1 s instead of
# the default 3 s (the tests of the grace itself keep the default or set a longer one)
QUICK_START = {"startup_grace_s": 1}
# a real job whose step log the test writes itself
SLEEPING_RUN = f'{PYTHON} -c "import time; time.sleep(600)"'
# a job whose "cloud" part fails (after the launch was confirmed) while its "onprem" part
# keeps running
HALF_FAILING_RUN = (
    f'{PYTHON} -c "import os, sys, time; '
    "(time.sleep(6), sys.exit(3)) if os.environ['ELASTICGRID_PART'].endswith('--cloud') "
    'else time.sleep(600)"'
)
# a job that starts fine and fails 6 s later (after the launch was confirmed)
LATE_FAILING_RUN = (
    f"{PYTHON} -c \"import sys, time; time.sleep(6); print('loading shard 7'); "
    "print('boom: corrupt batch'); sys.exit(3)\""
)
# a job that starts fine, prints the envs of launch_printing_envs 6 s later, and fails
PRINTED_ENVS = ("MODE", "CHAOS_ITER", "HF_TOKEN", "DB_URL", "DATA_URL", "RUN_SIGNATURE")
ENV_PRINTING_RUN = (
    f'{PYTHON} -c "import os, sys, time; time.sleep(6); '
    f"print(' '.join(k + '=' + os.environ[k] for k in '{' '.join(PRINTED_ENVS)}'.split())); "
    'sys.exit(3)"'
)
# a job whose part-local rank 1 fails at once while the other ranks keep running
ONE_RANK_FAILING_RUN = (
    f'{PYTHON} -c "import os, sys, time; '
    "(print('rank 1: out of memory'), sys.exit(3)) if os.environ['RANK'] == '1' "
    'else time.sleep(600)"'
)
# a job whose "onprem" ranks ignore the first SIGTERM (a checkpoint that outlasts a stop's
# grace) and die at the second; its "cloud" ranks die at the first
STUBBORN_RUN = (
    f'{PYTHON} -c "import os, signal, time; '
    "signal.signal(signal.SIGTERM, lambda *_: signal.signal(signal.SIGTERM, signal.SIG_DFL)) "
    "if os.environ['ELASTICGRID_PART'].endswith('--onprem') else None; "
    'time.sleep(600)"'
)
# on remote hosts (SSH, fake EC2 VMs): the engine syncs train_elastic.py's folder and starts
# the ranks there; 4 micro-batches per step: at 1 rank three of them wait (queue-bound)
REMOTE_WORKDIR = str(TRAIN.parent)
REMOTE_TRAIN_RUN = (
    f"{PYTHON} {TRAIN.name} --steps {{{{ dag_run.conf.get('steps', 30) }}}} "
    "--global-batch 4 --microbatch-seconds 0.05"
)
# one node unless the conf says otherwise
REMOTE_NODES = "{{ dag_run.conf.get('nodes', 1) }}"
# a remote scale check's scaling: grow a queue-bound job from 1 node to 2, or never scale (a
# check that waits for the job to end or for a lost node)
GROWS_TO_2 = {"max_nodes": 2, "min_samples": 3, "window_size": 4, "target_step_s": 1.0}
NEVER_SCALES = {"max_nodes": 1, "min_samples": 1000}


def remote_launch(conn_id: str) -> dict[str, Any]:
    """The launch arguments of a remote test DAG whose grid is connection ``conn_id``'s."""
    return {
        "elasticgrid_conn_id": conn_id,
        "job_name": JOB,
        "run": REMOTE_TRAIN_RUN,
        "workdir": REMOTE_WORKDIR,
        # a value that must never show in user data, on a host's command line or disk
        "envs": {"TRAINING_TOKEN": "{{ dag_run.conf.get('token', 'none') }}"},
        "recovery": {"mode": "none"},
        "startup_grace_s": 2,
    }


def remote_scale_check(conn_id: str, timeout: float, scaling: Mapping[str, Any]) -> Any:
    """A remote test DAG's ``scale_check`` of the job from 1 node, poked every second."""
    from elasticgrid_provider.sensors import ElasticScaleSensor

    return ElasticScaleSensor(
        task_id="scale_check",
        job_name=JOB,
        min_nodes=1,
        poke_interval=1,
        timeout=timeout,
        elasticgrid_conn_id=conn_id,
        **scaling,
    )


def remote_training(conn_id: str, timeout: float, envs: Mapping[str, str] | None = None) -> None:
    """The job on 1 node, queue-bound: the check grows it to 2, the relaunch trains to the end
    (``envs``: more for its ranks)."""
    launch = remote_launch(conn_id)
    launch["envs"] = {**launch["envs"], **(envs or {})}
    start = plan_and_launch(REMOTE_NODES, **launch)
    scale_check = remote_scale_check(conn_id, timeout, GROWS_TO_2)
    start.launch >> scale_check
    replan_and_relaunch(scale_check, wait_for_completion=True, poll_interval=1, **launch)


def remote_recovery(conn_id: str, timeout: float) -> None:
    """An author's scaling pipeline with nothing in it about recovery: a check that never
    scales, and the re-plan and relaunch it leads to (the re-plan's task id is ``plan``)."""
    launch = remote_launch(conn_id)
    recovery_check = remote_scale_check(conn_id, timeout, NEVER_SCALES)
    replan_and_relaunch(
        recovery_check, plan_task_id="plan", wait_for_completion=True, poll_interval=1, **launch
    )
