"""DAGs for the tests on SSH hosts: the grid comes from the ``elasticgrid_ssh`` connection.

The test points that connection at its namespace hosts (``tests/ssh_hosts.py``)
and at a jobs root the hosts cannot see. ``train_elastic.py``'s folder is the
launch's ``workdir``: the engine syncs it to each host and the ranks start
there, so the ``run`` names the script by a relative path.
"""

from __future__ import annotations

from airflow.sdk import DAG

from elasticgrid_provider.dag_builders import plan_and_launch
from elasticgrid_provider.operators import LaunchOperator, PlanPlacementOperator
from tests.dag_settings import REMOTE_NODES, remote_launch, remote_recovery, remote_training

SSH_CONN = "elasticgrid_ssh"
SSH = {"elasticgrid_conn_id": SSH_CONN}
NODES = REMOTE_NODES
LAUNCH = remote_launch(SSH_CONN)

with DAG(dag_id="ssh_training", schedule=None, catchup=False):
    remote_training(SSH_CONN, timeout=120)

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
    # its check never scales: it is about a lost host
    remote_recovery(SSH_CONN, timeout=90)

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
