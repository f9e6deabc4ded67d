"""DAGs for the tests on SSH hosts: the grid comes from the ``elasticgrid_ssh`` connection.

The test points that connection at its namespace hosts (``tests/ssh_hosts.py``)
and at a jobs root the hosts cannot see. ``train_elastic.py``'s folder is the
launch's ``workdir``: the engine syncs it to each host and the ranks start
there, so the ``run`` names the script by a relative path.
"""

from __future__ import annotations

from airflow.sdk import DAG

from elasticgrid_provider.dag_builders import plan_and_launch, replan_and_relaunch
from elasticgrid_provider.operators import LaunchOperator, PlanPlacementOperator
from elasticgrid_provider.sensors import ElasticScaleSensor
from tests.dag_settings import JOB, REMOTE_TRAIN_RUN, REMOTE_WORKDIR

SSH_CONN = "elasticgrid_ssh"
WORKDIR = REMOTE_WORKDIR
SSH_TRAIN_RUN = REMOTE_TRAIN_RUN
SSH = {"elasticgrid_conn_id": SSH_CONN}
NODES = "{{ dag_run.conf.get('nodes', 1) }}"
LAUNCH = {
    **SSH,
    "job_name": JOB,
    "run": SSH_TRAIN_RUN,
    "workdir": WORKDIR,
    # a value that must never show on a host's command line or disk
    "envs": {"TRAINING_TOKEN": "{{ dag_run.conf.get('token', 'none') }}"},
    "recovery": {"mode": "none"},
    "startup_grace_s": 2,
}

with DAG(dag_id="ssh_training", schedule=None, catchup=False):
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
        timeout=120,
        **SSH,
    )
    start.launch >> scale_check
    replan_and_relaunch(scale_check, wait_for_completion=True, poll_interval=1, **LAUNCH)

with DAG(dag_id="ssh_plan", schedule=None, catchup=False):
    PlanPlacementOperator(task_id="plan", nodes=NODES, **SSH)

with DAG(dag_id="ssh_launch", schedule=None, catchup=False):
    # plan -> launch without a scale check: the tests resize it by running it again
    plan_and_launch(NODES, **LAUNCH)

with DAG(
    dag_id="ssh_launch_placement",
    schedule=None,
    catchup=False,
    render_template_as_native_obj=True,
):
    # a placement handed in through the conf, as an upstream task's XCom would be
    LaunchOperator(task_id="launch", placement="{{ dag_run.conf['placement'] }}", **LAUNCH)

with DAG(dag_id="ssh_recovery", schedule=None, catchup=False):
    # the scaling pipeline of an author: nothing in it is about recovery
    recovery_check = ElasticScaleSensor(
        task_id="scale_check",
        job_name=JOB,
        min_nodes=1,
        max_nodes=1,
        min_samples=1000,  # never scales: this check is about a lost host
        poke_interval=1,
        timeout=90,
        **SSH,
    )
    replan_and_relaunch(
        recovery_check, plan_task_id="plan", wait_for_completion=True, poll_interval=1, **LAUNCH
    )

with DAG(dag_id="ssh_launch_setup", schedule=None, catchup=False):
    # a launch with a setup command from the conf: the kill tests hold one part's setup
    plan_and_launch(
        "{{ dag_run.conf.get('nodes', 2) }}",
        setup="{{ dag_run.conf['setup'] }}",
        retries=0,
        **LAUNCH,
    )

with DAG(dag_id="ssh_launch_long_grace", schedule=None, catchup=False):
    # ssh_launch with a start-up grace that outlasts any test's kill with every rank up
    plan_and_launch(NODES, retries=0, **{**LAUNCH, "startup_grace_s": 120})
