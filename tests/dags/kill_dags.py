"""DAGs for the on_kill tests: a launch that waits on a job that would run for minutes."""

from __future__ import annotations

from airflow.sdk import DAG

from elasticgrid_provider.operators import LaunchOperator, PlanPlacementOperator
from tests.dag_settings import JOB, NODES, SLEEPING_RUN, TWO_LOCAL_PROVIDERS

SLOW_PROVIDERS = [
    {**provider, "engine": "module=tests.fake_engines:SlowLocalEngine"}
    for provider in TWO_LOCAL_PROVIDERS
]


def launch_and_wait(dag_id: str, providers: list) -> None:
    """plan -> launch a job that would sleep for minutes, and wait for it."""
    with DAG(dag_id=dag_id, schedule=None, catchup=False):
        plan = PlanPlacementOperator(task_id="plan", nodes=NODES, providers=providers)
        plan >> LaunchOperator(
            task_id="launch",
            job_name=JOB,
            run=SLEEPING_RUN,
            placement=plan.output,
            recovery={"mode": "none"},
            wait_for_completion=True,
            poll_interval=0.5,
        )


launch_and_wait("launch_and_wait_long", TWO_LOCAL_PROVIDERS)
launch_and_wait("launch_slow_provision", SLOW_PROVIDERS)

HANGING_PROVIDERS = [
    {
        "name": "hang",
        "engine": "module=tests.fake_engines:HangingStartEngine",
        "max_nodes": 4,
        "cost_per_node_hour": 1.0,
        "spot": True,
    }
]

# a launch whose engine starts the ranks, then takes FAKE_START_HANG_S seconds to return:
# a kill in between finds ranks iroh-tinker has not recorded
with DAG(dag_id="launch_hanging_start", schedule=None, catchup=False):
    hanging_plan = PlanPlacementOperator(task_id="plan", nodes=NODES, providers=HANGING_PROVIDERS)
    hanging_plan >> LaunchOperator(
        task_id="launch",
        job_name=JOB,
        run=SLEEPING_RUN,
        placement=hanging_plan.output,
        recovery={"mode": "none"},
        envs={"FAKE_START_HANG_S": "{{ dag_run.conf.get('hang', 0) }}"},
    )

# a job whose engine holds in ``stop`` after the ranks are gone, while its part folder has a
# ``hold-stop`` file (tests.fake_engines.HeldStopEngine): a resize killed there has stopped the
# old launch and recorded nothing after
HELD_STOP_PROVIDERS = [
    {
        "name": "held",
        "engine": "module=tests.fake_engines:HeldStopEngine",
        "max_nodes": 4,
        "cost_per_node_hour": 1.0,
        "spot": False,
    }
]
with DAG(dag_id="launch_held_stop", schedule=None, catchup=False):
    held_plan = PlanPlacementOperator(task_id="plan", nodes=NODES, providers=HELD_STOP_PROVIDERS)
    held_plan >> LaunchOperator(
        task_id="launch",
        job_name=JOB,
        run=SLEEPING_RUN,
        placement=held_plan.output,
        recovery={"mode": "none"},
        startup_grace_s=1,
    )

# a launch whose start-up grace lasts long enough for a kill to land in it with every rank up
with DAG(dag_id="launch_long_grace", schedule=None, catchup=False):
    grace_plan = PlanPlacementOperator(task_id="plan", nodes=NODES, providers=TWO_LOCAL_PROVIDERS)
    grace_plan >> LaunchOperator(
        task_id="launch",
        job_name=JOB,
        run=SLEEPING_RUN,
        placement=grace_plan.output,
        recovery={"mode": "none"},
        startup_grace_s=12,
    )
