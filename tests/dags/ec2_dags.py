"""DAGs for the tests on fake EC2 VMs: the grid comes from the ``elasticgrid_ec2`` connection.

The test points that connection at ``ec2`` providers whose instances a moto server starts
and the fake-VM harness boots as SSH hosts (``tests/ec2_hosts.py``), and at a jobs root
the instances cannot see. As on SSH hosts, ``train_elastic.py``'s folder is the
``workdir`` the engine syncs to each instance.
"""

from __future__ import annotations

from airflow.sdk import DAG, task

from elasticgrid_provider.dag_builders import plan_and_launch, replan_and_relaunch
from elasticgrid_provider.operators import StopJobOperator
from elasticgrid_provider.sensors import ElasticScaleSensor
from tests.dag_settings import JOB, REMOTE_TRAIN_RUN, REMOTE_WORKDIR

EC2_CONN = "elasticgrid_ec2"
EC2 = {"elasticgrid_conn_id": EC2_CONN}
NODES = "{{ dag_run.conf.get('nodes', 1) }}"
LAUNCH = {
    **EC2,
    "job_name": JOB,
    "run": REMOTE_TRAIN_RUN,
    "workdir": REMOTE_WORKDIR,
    # a value that must never show in user data, on a host's command line or disk
    "envs": {"TRAINING_TOKEN": "{{ dag_run.conf.get('token', 'none') }}"},
    "recovery": {"mode": "none"},
    "startup_grace_s": 2,
}

with DAG(dag_id="ec2_training", schedule=None, catchup=False):
    # 1 instance, queue-bound: the check grows it to 2, the relaunch trains to the end
    start = plan_and_launch(NODES, **LAUNCH)
    scale_check = ElasticScaleSensor(
        task_id="scale_check",
        job_name=JOB,
        min_nodes=1,
        max_nodes=2,
        min_samples=3,
        window_size=4,
        target_step_s=1.0,
        poke_interval=1,
        timeout=180,
        **EC2,
    )
    start.launch >> scale_check
    replan_and_relaunch(scale_check, wait_for_completion=True, poll_interval=1, **LAUNCH)

with DAG(dag_id="ec2_launch", schedule=None, catchup=False):
    plan_and_launch(NODES, **LAUNCH)

with DAG(dag_id="ec2_launch_once", schedule=None, catchup=False):
    # no retry: a launch that fails shows what it left behind (nothing)
    plan_and_launch(NODES, retries=0, **LAUNCH)

with DAG(dag_id="ec2_recovery", schedule=None, catchup=False):
    # an author's scaling pipeline: nothing in it is about spot reclaims
    recovery_check = ElasticScaleSensor(
        task_id="scale_check",
        job_name=JOB,
        min_nodes=1,
        max_nodes=1,
        min_samples=1000,  # never scales: this check is about a reclaimed instance
        poke_interval=1,
        timeout=120,
        **EC2,
    )
    replan_and_relaunch(
        recovery_check, plan_task_id="plan", wait_for_completion=True, poll_interval=1, **LAUNCH
    )

with DAG(dag_id="ec2_teardown", schedule=None, catchup=False):
    # the teardown pattern of docs/clouds.md: launch >> checks >> stop.as_teardown(...)
    start = plan_and_launch(NODES, **LAUNCH)

    @task
    def train_checks() -> None:
        """The training's checks, which fail: the teardown still ends every instance."""
        raise RuntimeError("the evaluation loss is NaN")

    stop = StopJobOperator(task_id="stop", job_name=JOB, **EC2)
    start.launch >> train_checks() >> stop.as_teardown(setups=start.launch)

with DAG(dag_id="ec2_until_done", schedule=None, catchup=False):
    # no teardown and no stop: the check that sees the job end is the last task
    start = plan_and_launch(NODES, **LAUNCH)
    done_check = ElasticScaleSensor(
        task_id="scale_check",
        job_name=JOB,
        min_nodes=1,
        max_nodes=1,
        min_samples=1000,  # never scales: it waits for the job to end
        poke_interval=1,
        timeout=180,
        **EC2,
    )
    start.launch >> done_check
