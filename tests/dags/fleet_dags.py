"""DAGs for two jobs sharing one grid of 4 ``local`` nodes: fleet-aware plan -> launch.

Each DAG plans ``nodes`` (conf, default 3) with ``job_name`` set, so the plan counts
what the other job uses and reserves its placement, then launches a job that sleeps
``seconds`` (conf, default 8; less once the file ``release`` exists) and waits for it to
end, which gives its nodes back.
"""

from __future__ import annotations

from airflow.sdk import DAG, task

from elasticgrid_provider.dag_builders import plan_and_launch
from elasticgrid_provider.operators import LaunchOperator, PlanPlacementOperator
from tests.dag_settings import JOB, PYTHON, TWO_LOCAL_PROVIDERS

FOUR_LOCAL_NODES = [
    {"name": "local", "engine": "local", "max_nodes": 4, "cost_per_node_hour": 0.0, "spot": False}
]
# sleeps ``seconds``, or less once the file ``release`` (conf, optional) exists
SHORT_RUN = (
    f'{PYTHON} -c "import os, time; end = time.time() + float('
    "{{ dag_run.conf.get('seconds', 8) }}); release = '{{ dag_run.conf.get('release', '') }}'\n"
    'while time.time() < end and not (release and os.path.exists(release)): time.sleep(0.1)"'
)
NODES = "{{ dag_run.conf.get('nodes', 3) }}"
MIN_NODES = "{{ dag_run.conf.get('min_nodes', dag_run.conf.get('nodes', 3)) }}"
PRIORITY = "{{ dag_run.conf.get('priority', 0) }}"


def fleet_dag(
    dag_id: str,
    on_shortfall: str,
    wait_for_completion: bool = True,
    providers: list | None = None,
    **plan_arguments: object,
) -> DAG:
    """plan (fleet-aware, ``on_shortfall``) -> launch a short sleeping job and wait for it
    (or, without ``wait_for_completion``, leave it running)."""
    with DAG(dag_id=dag_id, schedule=None, catchup=False) as dag:
        plan_and_launch(
            NODES,
            providers=providers or FOUR_LOCAL_NODES,
            job_name=JOB,
            run=SHORT_RUN,
            recovery={"mode": "none"},
            wait_for_completion=wait_for_completion,
            poll_interval=0.5,
            startup_grace_s=1,
            plan_arguments={
                "job_name": JOB,
                "priority": PRIORITY,
                "min_nodes": MIN_NODES,
                "on_shortfall": on_shortfall,
                "poll_interval": 0.5,
                **plan_arguments,
            },
        )
    return dag


fleet_dag("fleet_hold", "fail", wait_for_completion=False)  # a job that holds its nodes
fleet_dag("fleet_wait", "wait")
fleet_dag("fleet_take_what_fits", "take_what_fits")
fleet_dag("fleet_fail", "fail")
fleet_dag("fleet_wait_briefly", "wait", capacity_timeout=3)
fleet_dag("fleet_wait_deferrable", "wait", deferrable=True)
# bad fleet arguments, from the conf (each rendered field checked before the ledger is touched)
fleet_dag(
    "fleet_bad_arguments",
    "{{ dag_run.conf.get('on_shortfall', 'wait') }}",
    capacity_timeout="{{ dag_run.conf.get('capacity_timeout', 60) }}",
)

# on two providers (2 free on-prem nodes, 4 paid cloud ones): a job that holds on-prem nodes
fleet_dag("fleet_hold_on_two", "fail", wait_for_completion=False, providers=TWO_LOCAL_PROVIDERS)

# a plan without job_name: it learns the job's name from the launch of its placement
with DAG(dag_id="fleet_unaware_plan", schedule=None, catchup=False):
    plan_and_launch(
        NODES,
        providers=TWO_LOCAL_PROVIDERS,
        plan_arguments={"job_name": None, "on_shortfall": "fail"},
        job_name=JOB,
        run=SHORT_RUN,
        recovery={"mode": "none"},
        startup_grace_s=1,
    )

# a plan without job_name and no launch to learn it from: it reserves nothing
with DAG(dag_id="fleet_plan_only", schedule=None, catchup=False):
    PlanPlacementOperator(task_id="plan", nodes=NODES, providers=TWO_LOCAL_PROVIDERS)

# a launch that fails before it starts anything (secret_envs names no key of envs)
with DAG(dag_id="fleet_bad_launch", schedule=None, catchup=False):
    plan_and_launch(
        NODES,
        providers=FOUR_LOCAL_NODES,
        plan_arguments={"job_name": JOB, "on_shortfall": "fail"},
        job_name=JOB,
        run=SHORT_RUN,
        envs={},
        secret_envs=["MISSING"],
        recovery={"mode": "none"},
        startup_grace_s=1,
    )


# job A plans; before its launch, its reservation lapses and job B (conf ``holder``) takes
# the nodes; A's launch (on_shortfall: its plan's, from the conf) plans again, waits, or
# fails. B sleeps ``holder_seconds`` (conf, default 600).
HOLDER = "{{ dag_run.conf['holder'] }}"
HOLDER_RUN = SHORT_RUN.replace("'seconds', 8", "'holder_seconds', 600")


@task
def lapse(ti=None) -> str:  # type: ignore[no-untyped-def]
    """Drop job A's reservation, as its lease lapsing would (a launch that ran long after
    its plan); returns the launch id it dropped."""
    from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook
    from elasticgrid_provider.hooks.grid_capacity import GridCapacity
    from elasticgrid_provider.hooks.grid_ledger import GridLedgerStore

    reservation = ti.xcom_pull(task_ids="plan", key="reservation")
    grid = GridCapacity(GridLedgerStore(ElasticGridHook().jobs_root))
    assert grid.drop_reservation(reservation["job"], reservation["launch_id"])
    return str(reservation["launch_id"])


def taken_before_launch_dag(dag_id: str, providers: list, deferrable: bool = False) -> DAG:
    """plan A -> A's reservation lapses -> plan and launch B on those nodes -> launch A."""
    with DAG(dag_id=dag_id, schedule=None, catchup=False) as dag:
        plan = PlanPlacementOperator(
            task_id="plan",
            nodes=NODES,
            providers=providers,
            job_name=JOB,
            min_nodes=MIN_NODES,
            on_shortfall="{{ dag_run.conf.get('on_shortfall', 'wait') }}",
            poll_interval=0.5,
        )
        holder = plan_and_launch(
            "{{ dag_run.conf.get('holder_nodes', 3) }}",
            providers=providers,
            plan_task_id="plan_holder",
            launch_task_id="take",
            plan_arguments={"job_name": HOLDER, "on_shortfall": "fail"},
            job_name=HOLDER,
            run=HOLDER_RUN,
            recovery={"mode": "none"},
            startup_grace_s=1,
        )
        launch = LaunchOperator(
            task_id="launch",
            job_name=JOB,
            placement=plan.output,
            run=SHORT_RUN,
            recovery={"mode": "none"},
            startup_grace_s=1,
            poll_interval=0.5,
            deferrable=deferrable,
        )
        plan >> lapse() >> holder.plan
        holder.launch >> launch
    return dag


taken_before_launch_dag("fleet_taken_four", FOUR_LOCAL_NODES)
taken_before_launch_dag("fleet_taken_four_deferrable", FOUR_LOCAL_NODES, deferrable=True)
taken_before_launch_dag("fleet_taken_two", TWO_LOCAL_PROVIDERS)
