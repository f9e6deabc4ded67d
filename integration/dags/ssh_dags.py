"""The elastic training pipeline on SSH hosts that share no folder with the workers.

The ``elasticgrid_ssh`` connection (set by the suite) names two SSH hosts as
provider ``onprem``, one node each, with a pool folder both mount as
``shared_dir``. ``train_elastic.py``'s folder is the launch's ``workdir``: the
engine syncs it to each host, and the ranks start there.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG
from it_remote_launch import JOB, remote_launch

from elasticgrid_provider.dag_builders import plan_and_launch, replan_and_relaunch
from elasticgrid_provider.sensors import ElasticScaleSensor

SSH = {"elasticgrid_conn_id": "elasticgrid_ssh"}
LAUNCH = remote_launch("elasticgrid_ssh", steps=80)

with DAG(dag_id="it_ssh_training", schedule=None, catchup=False, tags=["integration"]):
    start = plan_and_launch(1, **LAUNCH)
    scale_check = ElasticScaleSensor(
        task_id="scale_check",
        job_name=JOB,
        min_nodes=1,
        max_nodes=2,
        min_samples=3,
        window_size=4,
        target_step_s=1.0,
        poke_interval=15,
        mode="reschedule",
        timeout=timedelta(minutes=3),
        **SSH,
    )
    resize = replan_and_relaunch(scale_check, wait_for_completion=True, poll_interval=2, **LAUNCH)
    start.plan >> start.launch >> scale_check >> resize.plan >> resize.launch
