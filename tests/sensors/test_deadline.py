"""Which deadline a check works to, from real DAGs with ``deadline=`` alerts.

Airflow 3.3.2's ``dag.test()`` crashes at the end of a successful run of a
DAG that sets ``deadline=`` (upstream #73428). ``run_dag`` reports that in
``hit_deadline_defect``; these tests assert it, so they will say so when the
upstream fix lands, and assert on the task's own outcome meanwhile.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pendulum
import pytest

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.deadlines import parse_deadline, resolve_deadline
from tests.airflow_support import run_dag

pytestmark = pytest.mark.airflow
HOUR = timedelta(hours=1).total_seconds()


def _check_with_deadline(dag_id: str, job: str, **conf) -> tuple[dict, object]:
    run_dag("launch_sleeping", {"job_name": job, "nodes": 2})
    result = run_dag(dag_id, {"job_name": job, **conf})
    assert result.task_states == {"scale_check": "success"}
    assert result.hit_deadline_defect, "upstream #73428 seems fixed: drop the workaround"
    decision = result.xcom("scale_check")
    assert decision["action"] == "scale_up"  # the handed-in samples are queue-bound
    return decision, result


def test_fixed_datetime_deadline_is_exact(airflow_db, jobs_root):
    decision, _ = _check_with_deadline("deadline_fixed", "dl-fixed")
    expected = datetime(2030, 1, 1, tzinfo=timezone.utc).timestamp() + HOUR
    assert decision["deadline_at"] == expected
    assert decision["context"]["deadline_source"].startswith("DAG deadline alert FIXED_DATETIME")


def test_logical_date_deadline_is_exact(airflow_db, jobs_root):
    decision, result = _check_with_deadline("deadline_logical_date", "dl-logical")
    assert decision["deadline_at"] == pytest.approx(result.logical_date.timestamp() + HOUR)
    assert "DAGRUN_LOGICAL_DATE" in decision["context"]["deadline_source"]


def test_queued_at_deadline_is_approximated_by_run_after(airflow_db, jobs_root):
    decision, result = _check_with_deadline("deadline_queued_at", "dl-queued")
    assert decision["deadline_at"] == pytest.approx(result.run_after.timestamp() + HOUR)
    assert "approximated by run_after" in decision["context"]["deadline_source"]


def test_average_runtime_cannot_be_evaluated_and_gives_no_deadline(airflow_db, jobs_root, capfd):
    decision, _ = _check_with_deadline("deadline_average_runtime", "dl-average")
    assert decision["deadline_at"] is None
    output = capfd.readouterr()
    assert "AverageRuntimeDeadline cannot be evaluated from a task" in output.out + output.err


def test_the_explicit_deadline_argument_overrides_the_dag_alert(airflow_db, jobs_root):
    decision, _ = _check_with_deadline(
        "deadline_explicit_override", "dl-explicit", deadline="2031-05-01T12:00:00+00:00"
    )
    assert decision["deadline_at"] == datetime(2031, 5, 1, 12, tzinfo=timezone.utc).timestamp()
    assert decision["context"]["deadline_source"] == "the deadline argument"


def test_a_templated_total_steps_gives_the_steps_left_after_the_newest_sample(
    airflow_db, jobs_root
):
    run_dag("launch_sleeping", {"job_name": "dl-total", "nodes": 2})
    result = run_dag("deadline_total_steps", {"job_name": "dl-total", "total_steps": 1000})
    assert result.task_states == {"scale_check": "success"}
    decision = result.xcom("scale_check")
    assert decision["inputs"]["remaining_steps"] == 996  # the handed-in steps 0-3 are done
    # the deadline rule works to them: years to spare, so the job shrinks to save nodes
    assert (decision["action"], decision["rule"]) == ("scale_down", "deadline_slack")
    assert "the remaining 996 steps take" in decision["reason"]


def test_no_alert_and_no_argument_means_no_deadline():
    resolved = resolve_deadline(None, None, None)
    assert resolved.at is None and resolved.timestamp is None


@pytest.mark.parametrize("value", ["tomorrow-ish", "", 17, None])
def test_bad_explicit_deadlines_are_named(value):
    with pytest.raises(ElasticGridError, match="deadline must be"):
        parse_deadline(value)


def test_naive_explicit_deadline_is_utc():
    assert parse_deadline("2031-05-01T12:00:00") == pendulum.datetime(2031, 5, 1, 12)
