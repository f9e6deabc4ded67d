"""DAGs for the LaunchOperator tests (and to start jobs for the sensor tests)."""

from __future__ import annotations

from airflow.sdk import DAG

from elasticgrid_provider.dag_builders import plan_and_launch
from elasticgrid_provider.operators import PlanPlacementOperator
from tests.dag_settings import (
    ENV_PRINTING_RUN,
    FAILING_RUN,
    HALF_FAILING_RUN,
    JOB,
    LATE_FAILING_RUN,
    NODES,
    ONE_FAILING_PROVIDER,
    ONE_RANK_FAILING_RUN,
    QUEUE_BOUND_RUN,
    QUICK_START,
    SLEEPING_RUN,
    TRAIN_RUN,
    TWO_LOCAL_PROVIDERS,
)


def launch_dag(dag_id: str, providers: list, run: str, **launch_arguments) -> DAG:
    """plan -> launch, with the launch arguments under test."""
    with DAG(dag_id=dag_id, schedule=None, catchup=False) as dag:
        plan_and_launch(
            NODES,
            providers=providers,
            job_name=JOB,
            run=run,
            recovery={"mode": "none"},
            poll_interval=0.5,
            **launch_arguments,
        )
    return dag


launch_dag("launch_no_wait", TWO_LOCAL_PROVIDERS, TRAIN_RUN)
launch_dag("launch_and_wait", TWO_LOCAL_PROVIDERS, TRAIN_RUN, wait_for_completion=True)
launch_dag(
    "launch_and_wait_deferrable",
    TWO_LOCAL_PROVIDERS,
    TRAIN_RUN,
    wait_for_completion=True,
    deferrable=True,
)
launch_dag("launch_failing_job", TWO_LOCAL_PROVIDERS, FAILING_RUN, wait_for_completion=True)
launch_dag("launch_failing_job_no_wait", TWO_LOCAL_PROVIDERS, FAILING_RUN)
launch_dag("launch_provider_fails", ONE_FAILING_PROVIDER, TRAIN_RUN)
launch_dag("launch_queue_bound", TWO_LOCAL_PROVIDERS, QUEUE_BOUND_RUN, **QUICK_START)
launch_dag("launch_sleeping", TWO_LOCAL_PROVIDERS, SLEEPING_RUN, **QUICK_START)
launch_dag("launch_half_failing", TWO_LOCAL_PROVIDERS, HALF_FAILING_RUN)
launch_dag("launch_one_rank_failing", TWO_LOCAL_PROVIDERS, ONE_RANK_FAILING_RUN, startup_grace_s=5)
launch_dag(
    "launch_queue_bound_two_procs",
    TWO_LOCAL_PROVIDERS,
    QUEUE_BOUND_RUN,
    procs_per_node=2,
    **QUICK_START,
)
launch_dag(
    "launch_late_failing_job", TWO_LOCAL_PROVIDERS, LATE_FAILING_RUN, wait_for_completion=True
)

# -- launch safety: the five-step resize, attach rules, secrets, partial starts ----------
UNKNOWN_ENGINE_PROVIDERS = [{**TWO_LOCAL_PROVIDERS[0], "engine": "warp-drive"}]
MISSING_MODULE_PROVIDERS = [
    {**TWO_LOCAL_PROVIDERS[0], "engine": "module=tests.fake_engines:NoSuchEngine"}
]
PARTLY_STARTING_PROVIDERS = [
    {
        "name": "flaky",
        "engine": "module=tests.fake_engines:PartlyStartingEngine",
        "max_nodes": 4,
        "cost_per_node_hour": 1.0,
        "spot": True,
    }
]
# a generous grace, so that a rank that dies at once is seen dead even on a loaded machine
launch_dag("launch_dies_at_once", TWO_LOCAL_PROVIDERS, FAILING_RUN, startup_grace_s=8)
launch_dag("launch_unknown_engine", UNKNOWN_ENGINE_PROVIDERS, TRAIN_RUN)
launch_dag("launch_missing_engine_module", MISSING_MODULE_PROVIDERS, TRAIN_RUN)
launch_dag("launch_missing_program", TWO_LOCAL_PROVIDERS, "/nonexistent/bin/train --steps 3")
launch_dag("launch_partly_starting", PARTLY_STARTING_PROVIDERS, SLEEPING_RUN)
# envs and setup from the run's conf: what attach compares, and what must stay secret
launch_dag(
    "launch_with_envs",
    TWO_LOCAL_PROVIDERS,
    SLEEPING_RUN,
    envs={"TRAINING_DATA_URL": "{{ dag_run.conf.get('data_url', 'https://data.example/v1') }}"},
    setup="{{ dag_run.conf.get('setup', 'true') }}",
    **QUICK_START,
)

# iroh-tinker's own cloud engines: gcp plans for no job (costing only) with a warning, but a
# plan of a launch (its job's name learned from it) refuses it, as does a plan for a job;
# aws is refused at plan
with DAG(dag_id="launch_on_iroh_cloud_engines", schedule=None, catchup=False):
    for cloud in ("gcp", "aws"):
        plan_and_launch(
            NODES,
            providers=[{"name": cloud, "max_nodes": 4, "cost_per_node_hour": 1.0}],
            plan_task_id=f"plan_{cloud}",
            launch_task_id=f"launch_{cloud}",
            plan_arguments={"job_name": None},  # learned from the launch
            job_name=f"{JOB}-{cloud}",
            run=TRAIN_RUN,
        )
    PlanPlacementOperator(
        task_id="cost_gcp",
        nodes=NODES,
        providers=[{"name": "gcp", "max_nodes": 4, "cost_per_node_hour": 1.0}],
    )
    PlanPlacementOperator(
        task_id="plan_gcp_for_job",
        nodes=NODES,
        providers=[{"name": "gcp", "max_nodes": 4, "cost_per_node_hour": 1.0}],
        job_name=f"{JOB}-gcp",
    )

# a job named like an envs value: its ranks print their environment, then fail, so the
# rank log's tail (in the task log) shows what the masker left of each value
launch_dag(
    "launch_printing_envs",
    TWO_LOCAL_PROVIDERS,
    ENV_PRINTING_RUN,
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
    **QUICK_START,
)
# a secret_envs name that is not a key of envs (a typo)
launch_dag(
    "launch_secret_typo",
    TWO_LOCAL_PROVIDERS,
    SLEEPING_RUN,
    envs={"MODE": "train-all", "HF_TOKEN": "hf_not_a_real_token"},
    secret_envs=["HF_TOKN"],
    **QUICK_START,
)
