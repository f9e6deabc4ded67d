"""PlanPlacementOperator: how many nodes, where, at what cost.

A thin shell over :class:`~elasticgrid_provider.core.planner.GridPlanner` on
the ``providers`` argument, else the connection's grid, else the built-in one.
``nodes`` may be an upstream scale decision (``nodes=scale_check.output``):
its ``target_nodes`` is placed, without the providers it quarantines (they lost
capacity, :mod:`elasticgrid_provider.core.recovery`; ``left_out`` says why).
The placement, plain JSON, is the task's return value for the launch task.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowFailException

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.formatting import placement_table
from elasticgrid_provider.core.recovery import quarantine_from_record
from elasticgrid_provider.core.validation import number_from_text
from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook


def nodes_from_argument(value: Any) -> Any:
    """The node count in ``value``: an int, a numeric string, or a decision's ``target_nodes``."""
    if isinstance(value, dict):
        if "target_nodes" not in value:
            raise ElasticGridError(
                f"nodes must be a number or a scale decision with target_nodes, got {value!r}"
            )
        return value["target_nodes"]
    if isinstance(value, str):
        try:
            return int(value)  # surrounding blanks allowed
        except ValueError:
            raise ElasticGridError(f"nodes must be a whole number, got {value!r}") from None
    return value


class PlanPlacementOperator(BaseOperator):
    """Place ``nodes`` nodes over the grid at the lowest cost within the spot budget.

    :param nodes: how many nodes (templated): an int, or an upstream scale decision
        (its ``target_nodes``), for example ``scale_check.output``.
    :param providers: an inline grid (list of provider dicts); default: the connection's.
    :param max_spot_fraction: cap on the share of spot nodes; default: the connection's, else 1.
    :param prefer: ``cost`` (cheapest) or ``balance`` (spread); default: the connection's.
    :param elasticgrid_conn_id: the ``elasticgrid`` connection.
    :return: the placement as plain JSON (``Placement.to_dict()``).
    """

    template_fields: Sequence[str] = ("nodes", "providers", "max_spot_fraction", "prefer")
    ui_color = "#e8f4fd"

    def __init__(
        self,
        *,
        nodes: Any,
        providers: list[dict[str, Any]] | None = None,
        max_spot_fraction: float | None = None,
        prefer: str | None = None,
        elasticgrid_conn_id: str = ElasticGridHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.nodes = nodes
        self.providers = providers
        self.max_spot_fraction = max_spot_fraction
        self.prefer = prefer
        self.elasticgrid_conn_id = elasticgrid_conn_id

    @cached_property
    def hook(self) -> ElasticGridHook:
        """The hook, built on first use (never at DAG parse time)."""
        return ElasticGridHook(self.elasticgrid_conn_id, providers=self.providers)

    def execute(self, context: Context) -> dict[str, Any]:
        """Plan the placement, log it as a table and return it for XCom."""
        try:
            nodes = nodes_from_argument(self.nodes)
            planner = self.hook.get_planner(number_from_text(self.max_spot_fraction), self.prefer)
            placement = planner.plan(nodes, leave_out=quarantine_from_record(self.nodes))
        except ElasticGridError as exc:
            raise AirflowFailException(str(exc)) from None
        for provider, why in placement.left_out:
            self.log.info("Left out provider %s: %s", provider, why)
        self.log.info(
            "Placed %d nodes over %s (prefer=%s, max_spot_fraction=%g): $%.2f/h\n%s",
            placement.total_nodes,
            self.hook.settings.source,
            planner.prefer,
            planner.max_spot_fraction,
            placement.cost_per_hour,
            placement_table(placement),
        )
        return placement.to_dict()
