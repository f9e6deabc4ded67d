"""The DAG builders: which tasks they make, how they chain them, where each argument goes.

The pipelines they build run for real in ``tests/test_example_dags.py``,
``tests/test_demo.py`` and the tests of ``tests/dags``; here is their wiring.
"""

from __future__ import annotations

from airflow.sdk import DAG

from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.providers import providers_from_dicts
from elasticgrid_provider.dag_builders import (
    local_demo_grid,
    plan_and_launch,
    replan_and_relaunch,
    stop_teardown,
)
from elasticgrid_provider.sensors import ElasticScaleSensor

GRID = local_demo_grid()
LAUNCH = {"job_name": "train", "run": "python train.py", "recovery": {"mode": "none"}}


def test_plan_and_launch_chains_a_launch_on_the_plans_placement():
    with DAG(dag_id="built", schedule=None) as dag:
        start = plan_and_launch(
            3, providers=GRID, plan_arguments={"prefer": "balance"}, poll_interval=2, **LAUNCH
        )
    assert sorted(dag.task_ids) == ["launch", "plan"]
    assert (start.plan.task_id, start.launch.task_id) == ("plan", "launch")
    assert start.plan.downstream_task_ids == {"launch"}
    assert (start.plan.nodes, start.plan.providers, start.plan.prefer) == (3, GRID, "balance")
    assert start.launch.placement.operator is start.plan
    assert (start.launch.job_name, start.launch.run, start.launch.poll_interval) == (
        "train",
        "python train.py",
        2,
    )


def test_the_connection_goes_to_both_tasks_and_none_keeps_the_default():
    with DAG(dag_id="on_a_connection", schedule=None):
        on_ssh = plan_and_launch(1, elasticgrid_conn_id="elasticgrid_ssh", **LAUNCH)
        default = plan_and_launch(
            1, plan_task_id="plan_default", launch_task_id="launch_default", **LAUNCH
        )
    assert on_ssh.plan.elasticgrid_conn_id == on_ssh.launch.elasticgrid_conn_id == "elasticgrid_ssh"
    assert default.plan.elasticgrid_conn_id == default.launch.elasticgrid_conn_id
    assert default.plan.elasticgrid_conn_id == "elasticgrid_default"
    assert on_ssh.plan.providers is None  # the connection's grid


def test_replan_and_relaunch_plans_at_the_size_the_check_decides():
    with DAG(dag_id="resized", schedule=None) as dag:
        check = ElasticScaleSensor(task_id="scale_check", job_name="train", providers=GRID)
        resize = replan_and_relaunch(check, providers=GRID, launch_task_id="resize", **LAUNCH)
    assert sorted(dag.task_ids) == ["replan", "resize", "scale_check"]
    assert check.downstream_task_ids == {"replan"}
    assert resize.plan.downstream_task_ids == {"resize"}
    assert resize.plan.nodes.operator is check
    assert resize.launch.placement.operator is resize.plan


def test_stop_teardown_stops_the_launched_job_as_the_launches_teardown():
    with DAG(dag_id="torn_down", schedule=None) as dag:
        start = plan_and_launch(2, providers=GRID, elasticgrid_conn_id="elasticgrid_ssh", **LAUNCH)
        check = ElasticScaleSensor(task_id="scale_check", job_name="train", providers=GRID)
        stop = stop_teardown(start)
        start.launch >> check >> stop
    assert sorted(dag.task_ids) == ["launch", "plan", "scale_check", "stop"]
    assert (stop.job_name, stop.elasticgrid_conn_id) == ("train", "elasticgrid_ssh")
    assert stop.is_teardown and start.launch.is_setup
    assert stop.trigger_rule == "all_done_setup_success"  # runs however the check ended
    assert stop.upstream_task_ids == {"launch", "scale_check"}


def test_writing_out_a_chain_the_builders_set_adds_no_edge():
    with DAG(dag_id="restated", schedule=None) as dag:
        start = plan_and_launch(2, providers=GRID, **LAUNCH)
        check = ElasticScaleSensor(task_id="scale_check", job_name="train", providers=GRID)
        resize = replan_and_relaunch(check, providers=GRID, **LAUNCH)
        start.plan >> start.launch >> check >> resize.plan >> resize.launch
    assert {task.task_id: sorted(task.upstream_task_ids) for task in dag.tasks} == {
        "plan": [],
        "launch": ["plan"],
        "scale_check": ["launch"],
        "replan": ["scale_check"],
        "relaunch": ["replan"],
    }


def test_the_local_demo_grid_turns_a_job_past_the_free_pool_into_two_parts():
    placement = GridPlanner(providers_from_dicts(local_demo_grid())).plan(4)
    assert [(share.provider.name, share.nodes) for share in placement.assignments] == [
        ("onprem", 2),
        ("cloud", 2),
    ]
    assert {provider["engine"] for provider in local_demo_grid()} == {"local"}


def test_the_local_demo_grid_is_a_new_list_each_time():
    mine = local_demo_grid(cloud_nodes=4, cloud_cost_per_node_hour=1.5, region="test-1")
    mine[1]["max_nodes"] = 99
    assert local_demo_grid(cloud_nodes=4)[1]["max_nodes"] == 4
    assert mine[1]["region"] == "test-1" and mine[1]["cost_per_node_hour"] == 1.5
