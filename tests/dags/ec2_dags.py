"""DAGs for the tests on fake EC2 VMs: the grid comes from the ``elasticgrid_ec2`` connection.

The test points that connection at ``ec2`` providers whose instances a moto server starts
and the fake-VM harness boots as SSH hosts (``tests/ec2_hosts.py``), and at a jobs root
the instances cannot see. As on SSH hosts, ``train_elastic.py``'s folder is the
``workdir`` the engine syncs to each instance.
"""

from __future__ import annotations

from airflow.sdk import DAG, task

from elasticgrid_provider.dag_builders import plan_and_launch
from elasticgrid_provider.operators import StopJobOperator
from tests.dag_settings import (
    FAILING_RUN,
    JOB,
    NEVER_SCALES,
    REMOTE_NODES,
    remote_launch,
    remote_recovery,
    remote_scale_check,
    remote_training,
)

EC2_CONN = "elasticgrid_ec2"
EC2 = {"elasticgrid_conn_id": EC2_CONN}
NODES = REMOTE_NODES
LAUNCH = remote_launch(EC2_CONN)

with DAG(dag_id="ec2_training", schedule=None, catchup=False):
    remote_training(EC2_CONN, timeout=180)

with DAG(dag_id="ec2_training_s3", schedule=None, catchup=False):
    # the ranks meet and checkpoint in S3 (the test's moto server; its endpoint from the conf)
    s3_env = {"AWS_ENDPOINT_URL": "{{ dag_run.conf['s3_endpoint'] }}"}
    s3_env |= {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    remote_training(EC2_CONN, timeout=180, envs={**s3_env, "AWS_DEFAULT_REGION": "us-east-1"})

with DAG(dag_id="ec2_launch", schedule=None, catchup=False):
    plan_and_launch(NODES, **LAUNCH)

with DAG(dag_id="ec2_launch_once", schedule=None, catchup=False):
    # no retry: a launch that fails shows what it left behind (nothing)
    plan_and_launch(NODES, retries=0, **LAUNCH)

with DAG(dag_id="ec2_failing_start", schedule=None, catchup=False):
    # the program fails at once: its last words outlive the instances the failure ends
    plan_and_launch(NODES, retries=0, **{**LAUNCH, "run": FAILING_RUN})

with DAG(dag_id="ec2_recovery", schedule=None, catchup=False):
    # its check never scales: it is about a reclaimed spot instance
    remote_recovery(EC2_CONN, timeout=120)

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
    start.launch >> remote_scale_check(EC2_CONN, timeout=180, scaling=NEVER_SCALES)
