"""DAGs for the ElasticScaleSensor tests.

The job under check is started by the test (or an upstream LaunchOperator);
the sensor's scheduler settings differ per DAG, because a sensor's
parameters are fixed when the DAG is parsed.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG, AsyncCallback, DeadlineAlert, DeadlineReference

from elasticgrid_provider.dag_builders import replan_and_relaunch
from elasticgrid_provider.sensors import ElasticScaleSensor
from elasticgrid_provider.sensors.scale import MIN_RESCHEDULE_S
from elasticgrid_provider.triggers.job import MIN_DEFERRAL_S
from tests.dag_settings import JOB, QUEUE_BOUND_RUN, QUICK_START
from tests.dag_settings import TWO_LOCAL_PROVIDERS as GRID

FIXED_DEADLINE = datetime(2030, 1, 1, tzinfo=timezone.utc)
CALLBACK = AsyncCallback("tests.deadline_callbacks.deadline_missed")
QUICK = {"poke_interval": 1, "timeout": 60, "providers": GRID}


def check(**arguments) -> ElasticScaleSensor:
    """A scale check of the run's job with quick test timings."""
    return ElasticScaleSensor(task_id="scale_check", job_name=JOB, **{**QUICK, **arguments})


def resize_after(scale_check: ElasticScaleSensor) -> None:
    """check -> plan at the decided size -> resize the queue-bound job."""
    replan_and_relaunch(
        scale_check,
        providers=GRID,
        plan_task_id="plan",
        launch_task_id="resize",
        job_name=JOB,
        run=QUEUE_BOUND_RUN,
        recovery={"mode": "none"},
        **QUICK_START,
    )


with DAG(dag_id="scale_up_then_resize", schedule=None, catchup=False):
    resize_after(check(min_nodes=1, max_nodes=4, min_samples=3, window_size=4))

with DAG(dag_id="scale_check_idle", schedule=None, catchup=False):
    # a short stabilisation window: the test is about the idle rule, and on a busy
    # machine an early check can recommend the current size, which the default
    # 600 s window would keep acting on past the test's timeout
    check(min_nodes=1, max_nodes=4, min_samples=3, target_step_s=5.0, scale_down_window_s=5)

with DAG(dag_id="scale_check_cooldown", schedule=None, catchup=False):
    check(min_nodes=1, max_nodes=8, min_samples=3, cooldown_s=3600, timeout=4, soft_fail=True)

with DAG(dag_id="scale_check_patient", schedule=None, catchup=False):
    # never decides (min_samples is out of reach): one check per run, which reads and holds
    check(min_samples=1000, timeout=0, soft_fail=True)

with DAG(dag_id="scale_check_deferrable", schedule=None, catchup=False):
    # below MIN_DEFERRAL_S: checks in the worker instead of deferring
    check(min_nodes=1, max_nodes=4, min_samples=3, deferrable=True, poke_interval=2)

with DAG(dag_id="scale_check_quick_reschedule", schedule=None, catchup=False):
    # reschedule mode below MIN_RESCHEDULE_S: checks in poke mode instead
    check(min_nodes=1, max_nodes=4, min_samples=3, poke_interval=1)

with DAG(dag_id="scale_check_safe_reschedule", schedule=None, catchup=False):
    check(min_nodes=1, max_nodes=4, min_samples=3, poke_interval=MIN_RESCHEDULE_S)

with DAG(dag_id="scale_check_deferred", schedule=None, catchup=False):
    check(min_nodes=1, max_nodes=4, min_samples=3, deferrable=True, poke_interval=MIN_DEFERRAL_S)

with DAG(dag_id="scale_check_concurrent", schedule=None, catchup=False, max_active_runs=2):
    resize_after(
        check(min_nodes=1, max_nodes=8, min_samples=3, cooldown_s=3600, timeout=3, soft_fail=True)
    )

HANDED_IN = [{"step": step, "duration_s": 10.0, "queue_s": 6.0, "nodes": 2} for step in range(4)]


def deadline_dag(dag_id: str, reference, **arguments) -> None:
    """A one-task DAG with a DAG-level deadline alert and a check on handed-in samples."""
    alert = DeadlineAlert(reference=reference, interval=timedelta(hours=1), callback=CALLBACK)
    with DAG(dag_id=dag_id, schedule=None, catchup=False, deadline=alert):
        check(min_nodes=1, max_nodes=8, samples=HANDED_IN, **arguments)


deadline_dag("deadline_fixed", DeadlineReference.FIXED_DATETIME(FIXED_DEADLINE))
deadline_dag("deadline_logical_date", DeadlineReference.DAGRUN_LOGICAL_DATE)
deadline_dag("deadline_queued_at", DeadlineReference.DAGRUN_QUEUED_AT)
deadline_dag("deadline_average_runtime", DeadlineReference.AVERAGE_RUNTIME(max_runs=3))
deadline_dag(
    "deadline_explicit_override",
    DeadlineReference.DAGRUN_LOGICAL_DATE,
    deadline="{{ dag_run.conf['deadline'] }}",
)
deadline_dag(
    "deadline_total_steps",
    DeadlineReference.FIXED_DATETIME(FIXED_DEADLINE),
    total_steps="{{ dag_run.conf['total_steps'] }}",
)

with DAG(dag_id="scale_check_any", schedule=None, catchup=False):
    check(min_nodes=1, max_nodes=8, min_samples=3)

with DAG(dag_id="scale_check_handed_in", schedule=None, catchup=False):
    check(
        min_nodes=1,
        max_nodes=8,
        cooldown_s=3600,
        timeout=0,  # one check per run: the handed-in samples are all there at once
        soft_fail=True,
        samples="{{ dag_run.conf['samples'] | tojson }}",
    )
