"""The example DAGs: the scheduled one, run for real (it starts its job, resizes it, skips when
idle), and elastic_fleet's two jobs on one grid, as Airflow loads it (its two branches must run
at once, which ``dag.test()`` does not do; the integration suite runs that case for real)."""

from __future__ import annotations

import pytest

from elasticgrid_provider.sensors import ElasticScaleSensor
from elasticgrid_provider.sensors.scale import MIN_RESCHEDULE_S
from elasticgrid_provider.triggers.job import MIN_DEFERRAL_S
from example_dags.elastic_fleet import EVALUATE, PRETRAIN
from example_dags.elastic_fleet import dag as elastic_fleet
from example_dags.elastic_rescale_check import DEFAULT_JOB_NAME
from example_dags.elastic_rescale_check import dag as elastic_rescale_check
from example_dags.elastic_training import dag as elastic_training
from tests.airflow_support import run_dag
from tests.job_processes import wait_for_lines

pytestmark = pytest.mark.airflow

CHECK_TASKS = ("scale_check", "plan", "resize")
START_TASKS = ("start_plan", "start")


def test_its_default_job_is_not_elastic_trainings():
    training_job = elastic_training.get_task("launch").job_name
    assert DEFAULT_JOB_NAME not in training_job
    assert "elastic-demo'" in training_job  # elastic_training's default, for the record


def test_no_example_check_waits_less_than_a_real_scheduler_can_turn_around():
    checks = [
        task
        for dag in (elastic_training, elastic_fleet, elastic_rescale_check)
        for task in dag.tasks
        if isinstance(task, ElasticScaleSensor)
    ]
    assert len(checks) >= 3
    for task in checks:  # the sensor never has to switch mode, so its log never says so
        if task.deferrable:
            assert task.poke_interval >= MIN_DEFERRAL_S, task.task_id
        elif task.mode == "reschedule":
            assert task.poke_interval >= MIN_RESCHEDULE_S, task.task_id


def test_a_launch_run_starts_the_job_and_the_next_run_resizes_it(airflow_db, jobs_root):
    started = run_dag("elastic_rescale_check", {"job_name": "nightly", "launch": True})
    assert started.task_states == {
        "find_job": "success",
        **dict.fromkeys(START_TASKS, "success"),
        **dict.fromkeys(CHECK_TASKS, "skipped"),
    }
    assert started.xcom("start")["nodes"] == 2
    # a scheduled check finds a job that has been running for a while: wait for its first steps
    wait_for_lines(jobs_root / "nightly--onprem" / "steps.jsonl", 3)
    # every param explicit: dag.test() on a DAG object imported once keeps the last run's conf
    result = run_dag("elastic_rescale_check", {"job_name": "nightly", "launch": False})
    assert result.task_states == {
        "find_job": "success",
        **dict.fromkeys(START_TASKS, "skipped"),
        **dict.fromkeys(CHECK_TASKS, "success"),
    }
    decision = result.xcom("scale_check")
    assert (decision["action"], decision["current_nodes"], decision["target_nodes"]) == (
        "scale_up",
        2,
        4,
    )
    resized = result.xcom("resize")
    assert resized["nodes"] == 4 and resized["status"] == "running"


def test_with_nothing_launched_a_run_skips_saying_how_to_start_the_job(
    airflow_db, jobs_root, capfd, caplog
):
    never_launched = {"job_name": DEFAULT_JOB_NAME, "launch": False}
    result = run_dag("elastic_rescale_check", never_launched)
    assert result.state == "success"
    assert result.task_states == dict.fromkeys(("find_job", *START_TASKS, *CHECK_TASKS), "skipped")
    output = capfd.readouterr()
    text = output.out + output.err + caplog.text
    assert f"job '{DEFAULT_JOB_NAME}' was never launched under {jobs_root}" in text
    assert 'trigger elastic_rescale_check with {"launch": true} to start it' in text


def test_elastic_fleet_shares_one_grid_between_two_jobs_whose_every_plan_names_its_job():
    plans = {
        task_id: elastic_fleet.get_task(task_id)
        for task_id in ("pretrain_plan", "pretrain_replan", "evaluate_plan")
    }
    assert {task_id: plan.job_name for task_id, plan in plans.items()} == {
        "pretrain_plan": PRETRAIN,
        "pretrain_replan": PRETRAIN,
        "evaluate_plan": EVALUATE,
    }
    grids = [plan.providers for plan in plans.values()]
    assert grids[0] and all(grid == grids[0] for grid in grids)
    pretrain, evaluate = plans["pretrain_plan"], plans["evaluate_plan"]
    # the low-priority job is elastic down to 2 nodes and starts on what fits
    assert (pretrain.priority, pretrain.min_nodes, pretrain.on_shortfall) == (
        0,
        2,
        "take_what_fits",
    )
    assert plans["pretrain_replan"].min_nodes == 2  # a resize never plans below it either
    # the urgent one waits for its nodes (the default) in the triggerer
    assert (evaluate.priority, evaluate.on_shortfall, evaluate.deferrable) == (10, "wait", True)
    check = elastic_fleet.get_task("pretrain_check")
    assert (check.job_name, check.priority) == (PRETRAIN, 0)
    # two independent branches: both jobs start at once
    roots = {task.task_id for task in elastic_fleet.roots}
    assert roots == {"pretrain_plan", "evaluate_plan"}
    assert elastic_fleet.get_task("evaluate").downstream_task_ids == set()
