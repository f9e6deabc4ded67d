"""Builders of the elastic training pipeline's tasks: the wiring every elastic DAG repeats.

:func:`plan_and_launch` (plan ``nodes`` over the grid, launch the job on that placement),
:func:`replan_and_relaunch` (after a scale check: re-plan at ``check.output``, relaunch; the
launch attaches when nothing changed), :func:`stop_teardown` (a ``StopJobOperator`` as the
teardown of the launches) and :func:`local_demo_grid` (two providers on this machine's local
engine). Each creates its tasks in the DAG being defined, chains them and returns them as a
:class:`PlannedLaunch`; the sensor stays in the DAG file, where its policy is read. The
builders, their arguments and an example: docs/dag-builders.md. Cheap at import: only the
operator modules, which a DAG file imports anyway.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from elasticgrid_provider.operators import LaunchOperator, PlanPlacementOperator, StopJobOperator

if TYPE_CHECKING:
    from elasticgrid_provider.sensors import ElasticScaleSensor

__all__ = [
    "PlannedLaunch",
    "local_demo_grid",
    "plan_and_launch",
    "replan_and_relaunch",
    "stop_teardown",
]


class PlannedLaunch(NamedTuple):
    """A plan task and the launch task that starts (or resizes) the job on its placement."""

    plan: PlanPlacementOperator
    launch: LaunchOperator


def plan_and_launch(
    nodes: Any,
    *,
    providers: Any = None,
    elasticgrid_conn_id: str | None = None,
    plan_task_id: str = "plan",
    launch_task_id: str = "launch",
    plan_arguments: Mapping[str, Any] | None = None,
    **launch_arguments: Any,
) -> PlannedLaunch:
    """Plan ``nodes`` over the grid, then launch the job on that placement: ``plan >> launch``.

    :param nodes: the node count (templated), or a scale decision (an upstream check's
        ``output``).
    :param providers: the grid (a list of provider dicts, or a template rendering to
        one); ``None`` plans over the connection's grid.
    :param elasticgrid_conn_id: the connection both tasks use; ``None`` keeps the
        operators' default connection.
    :param plan_task_id: the plan task's id.
    :param launch_task_id: the launch task's id.
    :param plan_arguments: more arguments of the plan task (``prefer``, ``priority``,
        ``on_shortfall``, ...); its ``job_name`` defaults to the launch's, so the plan
        counts the nodes other jobs on the grid hold and reserves what it places.
    :param launch_arguments: the LaunchOperator's arguments (``job_name``, ``run``, ...),
        all but ``placement``, which is the plan's output.
    """
    connection: dict[str, Any] = {}
    if elasticgrid_conn_id is not None:
        connection["elasticgrid_conn_id"] = elasticgrid_conn_id
    plan_arguments = dict(plan_arguments or {})
    if "job_name" in launch_arguments:  # the plan shares the grid as the job it launches
        plan_arguments.setdefault("job_name", launch_arguments["job_name"])
    plan = PlanPlacementOperator(
        task_id=plan_task_id,
        nodes=nodes,
        providers=providers,
        **connection,
        **plan_arguments,
    )
    launch = LaunchOperator(
        task_id=launch_task_id, placement=plan.output, **connection, **launch_arguments
    )
    plan >> launch
    return PlannedLaunch(plan, launch)


def replan_and_relaunch(
    check: ElasticScaleSensor,
    *,
    plan_task_id: str = "replan",
    launch_task_id: str = "relaunch",
    **arguments: Any,
) -> PlannedLaunch:
    """Re-plan at the size ``check`` decides, then relaunch the job: ``check >> replan >> relaunch``.

    The plan reads the decision (``nodes=check.output``), so a recovery's quarantined
    providers are left out of the new placement too. ``arguments`` are those of
    :func:`plan_and_launch` (the grid, the connection, the launch's arguments).
    """
    resized = plan_and_launch(
        check.output, plan_task_id=plan_task_id, launch_task_id=launch_task_id, **arguments
    )
    check >> resized.plan
    return resized


def stop_teardown(*starts: PlannedLaunch, task_id: str = "stop") -> StopJobOperator:
    """A stop of the job that ``starts`` launch, as their teardown: it runs once the tasks
    downstream of them are done, whatever their outcome, if one of the launches succeeded.

    The job and the connection are the first launch's; the DAG file chains the work before
    it (``check >> resize.launch >> stop``), as with any teardown.
    """
    first = starts[0].launch
    stop = StopJobOperator(
        task_id=task_id, job_name=first.job_name, elasticgrid_conn_id=first.elasticgrid_conn_id
    )
    return stop.as_teardown(setups=[start.launch for start in starts])


def local_demo_grid(
    *,
    onprem_nodes: int = 2,
    cloud_nodes: int = 6,
    cloud_cost_per_node_hour: float = 1.2,
    region: str = "demo-1",
) -> list[dict[str, Any]]:
    """Two providers on the local engine: a free on-prem pool and a paid spot "cloud" pool.

    The planner fills the free pool first, so a job of more than ``onprem_nodes`` nodes
    becomes a real two-part job (``<job>--onprem`` and ``<job>--cloud``) on this machine.
    A new list on every call: a DAG may change its copy.
    """
    return [
        {
            "name": "onprem",
            "engine": "local",
            "max_nodes": onprem_nodes,
            "cost_per_node_hour": 0.0,
            "spot": False,
        },
        {
            "name": "cloud",
            "engine": "local",
            "region": region,
            "max_nodes": cloud_nodes,
            "cost_per_node_hour": cloud_cost_per_node_hour,
            "spot": True,
        },
    ]
