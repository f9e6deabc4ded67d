"""Training on fake EC2 VMs through the real scheduler and Celery workers.

Two DAGs. In ``it_ec2_training`` the ``elasticgrid_ec2`` connection (created by the test through the REST API, as are the
AWS connection ``it_aws`` and the SSH connection ``it_ec2_key`` holding the key pair's
private key) names one ``ec2`` provider of two instances, which a moto server starts and
the fake-VM harness boots as SSH hosts. The launch runs in a Celery worker's task, its
parts in the launcher child process; the check and the teardown stop in other tasks. In ``it_ec2_deferred`` a deferrable launch
waits for a short job in the triggerer, whose status looks read the same connections there
and end the instances when the ranks are done.
"""

from __future__ import annotations

from airflow.sdk import DAG
from it_remote_launch import JOB, remote_launch

from elasticgrid_provider.dag_builders import plan_and_launch
from elasticgrid_provider.operators import StopJobOperator
from elasticgrid_provider.sensors import ElasticScaleSensor

EC2 = {"elasticgrid_conn_id": "elasticgrid_ec2"}
LAUNCH = remote_launch("elasticgrid_ec2", steps=100000, startup_grace_s=2)

with DAG(dag_id="it_ec2_training", schedule=None, catchup=False, tags=["integration"]):
    # the teardown pattern of docs/clouds.md: launch >> checks >> stop.as_teardown(...); the
    # job trains until the stop
    start = plan_and_launch(2, **LAUNCH)
    scale_check = ElasticScaleSensor(
        task_id="scale_check",
        job_name=JOB,
        min_nodes=2,
        max_nodes=2,  # holds at 2 while it trains, for a few checks
        min_samples=3,
        window_size=4,
        poke_interval=3,
        timeout=30,
        soft_fail=True,  # then skipped: the teardown stop ends the job and its instances
        **EC2,
    )
    stop = StopJobOperator(task_id="stop", job_name=JOB, **EC2)
    start.plan >> start.launch >> scale_check >> stop.as_teardown(setups=start.launch)

with DAG(dag_id="it_ec2_deferred", schedule=None, catchup=False, tags=["integration"]):
    # a job of about 20 s on one VM, waited for in the triggerer (no stop task: the status
    # look that finds its ranks done terminates the instance)
    plan_and_launch(
        1,
        **remote_launch("elasticgrid_ec2", steps=100, wait_for_completion=True, deferrable=True),
    )
