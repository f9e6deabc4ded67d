"""DAGs for the on_kill tests: a launch that waits on a job that would run for minutes.

Each is plan -> launch of a job that sleeps, on a grid whose engine stalls at the
moment a kill should land in.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG

from elasticgrid_provider.dag_builders import plan_and_launch
from tests.dag_settings import JOB, NODES, SLEEPING_RUN, TWO_LOCAL_PROVIDERS

SLOW_PROVIDERS = [
    {**provider, "engine": "module=tests.fake_engines:SlowLocalEngine"}
    for provider in TWO_LOCAL_PROVIDERS
]


def launch_sleeping_job(dag_id: str, providers: list, **launch_arguments) -> None:
    """A DAG of plan -> launch of a job that would sleep for minutes."""
    with DAG(dag_id=dag_id, schedule=None, catchup=False):
        plan_and_launch(
            NODES,
            providers=providers,
            job_name=JOB,
            run=SLEEPING_RUN,
            recovery={"mode": "none"},
            **launch_arguments,
        )


WAIT = {"wait_for_completion": True, "poll_interval": 0.5}
launch_sleeping_job("launch_and_wait_long", TWO_LOCAL_PROVIDERS, **WAIT)
launch_sleeping_job("launch_slow_provision", SLOW_PROVIDERS, **WAIT)
# a waiting launch with a retry left: a stop from outside must not be undone by the retry
launch_sleeping_job(
    "launch_and_wait_with_a_retry",
    TWO_LOCAL_PROVIDERS,
    retries=1,
    retry_delay=timedelta(seconds=0),
    **WAIT,
)

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
launch_sleeping_job(
    "launch_hanging_start",
    HANGING_PROVIDERS,
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
launch_sleeping_job("launch_held_stop", HELD_STOP_PROVIDERS, startup_grace_s=1)

# a launch whose start-up grace lasts long enough for a kill to land in it with every rank up
launch_sleeping_job("launch_long_grace", TWO_LOCAL_PROVIDERS, startup_grace_s=12)
