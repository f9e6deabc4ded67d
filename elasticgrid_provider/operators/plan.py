"""PlanPlacementOperator: how many nodes, where, at what cost.

A thin shell over :class:`~elasticgrid_provider.core.planner.GridPlanner`; with a job name
it shares the grid through :mod:`elasticgrid_provider.hooks.grid_capacity`. The rules:
docs/operators.md ("PlanPlacementOperator"), docs/fleet-ledger.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from elasticgrid_provider.core.clock import epoch_now
from elasticgrid_provider.core.errors import ElasticGridError, GridCapacityError, NewerRecordError
from elasticgrid_provider.core.fleet.sharing import DEFAULT_SHORTFALL_MODE, ShortfallMode, Verdict
from elasticgrid_provider.core.formatting import placement_table
from elasticgrid_provider.core.launch_spec import check_job_name
from elasticgrid_provider.core.placement import Placement
from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.recovery import quarantine_from_record
from elasticgrid_provider.core.validation import (
    check_choice,
    check_integer,
    check_number,
    number_from_text,
)
from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook
from elasticgrid_provider.operators.grid_wait import GridCapacityWait

if TYPE_CHECKING:
    from elasticgrid_provider.core.fleet.ledger import CapacityRequest

RESERVATION_XCOM_KEY = "reservation"
SHORTFALL_MODES = tuple(mode.value for mode in ShortfallMode)


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


def capacity_request(
    job_name: Any,
    nodes: Any,
    *,
    priority: Any,
    min_nodes: Any,
    on_shortfall: Any,
    capacity_timeout: Any,
    poll_interval: Any,
) -> CapacityRequest:
    """Rendered fleet arguments as a request for the grid; bad input is one sentence naming
    the field and value (an :class:`ElasticGridError`)."""
    from elasticgrid_provider.core.fleet.ledger import CapacityRequest, lease_for

    job = check_job_name(job_name)
    nodes = check_integer("nodes", nodes, minimum=1)
    priority = check_integer("priority", number_from_text(priority))
    least = nodes if min_nodes is None else number_from_text(min_nodes)
    least = check_integer("min_nodes", least, minimum=1)
    if least > nodes:
        raise ElasticGridError(f"min_nodes {least} must not be above nodes {nodes}")
    mode = ShortfallMode(check_choice("on_shortfall", on_shortfall, SHORTFALL_MODES))
    timeout = capacity_timeout
    if timeout is not None:
        timeout = check_number(
            "capacity_timeout", number_from_text(timeout), exclusive_minimum=True
        )
    poll = check_number("poll_interval", poll_interval, exclusive_minimum=True)
    return CapacityRequest(job, nodes, least, priority, mode, timeout, lease_for(poll))


class PlanPlacementOperator(BaseOperator):
    """Place ``nodes`` nodes over the grid at the lowest cost within the spot budget.

    :param nodes: how many nodes (templated): an int, or an upstream scale decision
        (its ``target_nodes``), for example ``scale_check.output``.
    :param providers: an inline grid (list of provider dicts); default: the connection's.
    :param max_spot_fraction: cap on the share of spot nodes; default: the connection's, else 1.
    :param prefer: ``cost`` (cheapest) or ``balance`` (spread); default: the connection's.
    :param job_name: the job the plan is for (templated); the plan shares the grid with the
        other jobs (docs/operators.md); None: the job its launch starts, else no reservation.
    :param priority: the job's priority, a whole number >= 0, higher first (templated).
    :param min_nodes: the fewest nodes the job may run on (templated; default ``nodes``).
    :param on_shortfall: ``wait`` (default), ``take_what_fits`` or ``fail`` (templated).
    :param capacity_timeout: seconds to wait for nodes before failing (templated; None: no limit).
    :param poll_interval: seconds between looks at the grid while waiting; each look renews
        the request's lease in the queue (four missed looks, at least two minutes, and it lapses).
    :param deferrable: wait in the triggerer; default ``[operators] default_deferrable``.
    :param elasticgrid_conn_id: the ``elasticgrid`` connection.
    :return: the placement as plain JSON (``Placement.model_dump()``).
    """

    template_fields: Sequence[str] = (
        "nodes",
        "providers",
        "max_spot_fraction",
        "prefer",
        "job_name",
        "priority",
        "min_nodes",
        "on_shortfall",
        "capacity_timeout",
    )
    ui_color = "#e8f4fd"

    def __init__(
        self,
        *,
        nodes: Any,
        providers: list[dict[str, Any]] | None = None,
        max_spot_fraction: float | None = None,
        prefer: str | None = None,
        job_name: str | None = None,
        priority: Any = 0,
        min_nodes: Any = None,
        on_shortfall: Any = DEFAULT_SHORTFALL_MODE,
        capacity_timeout: Any = None,
        poll_interval: float = 30.0,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        elasticgrid_conn_id: str = ElasticGridHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.nodes = nodes
        self.providers = providers
        self.max_spot_fraction = max_spot_fraction
        self.prefer = prefer
        self.job_name = job_name
        self.priority = priority
        self.min_nodes = min_nodes
        self.on_shortfall = on_shortfall
        self.capacity_timeout = capacity_timeout
        self.poll_interval = poll_interval
        self.deferrable = deferrable
        self.elasticgrid_conn_id = elasticgrid_conn_id

    @cached_property
    def hook(self) -> ElasticGridHook:
        """The hook, built on first use (never at DAG parse time)."""
        return ElasticGridHook(self.elasticgrid_conn_id, providers=self.providers)

    @cached_property
    def grid_wait(self) -> GridCapacityWait:
        """The task's wait for nodes on the shared grid, built on first use."""
        return GridCapacityWait(self)

    def _planner(self) -> GridPlanner:
        return self.hook.get_planner(number_from_text(self.max_spot_fraction), self.prefer)

    def capacity_request(self, nodes: Any) -> CapacityRequest:
        """The checked fleet arguments as a request (:func:`capacity_request`)."""
        return capacity_request(
            self.job_name,
            nodes,
            priority=self.priority,
            min_nodes=self.min_nodes,
            on_shortfall=self.on_shortfall,
            capacity_timeout=self.capacity_timeout,
            poll_interval=self.poll_interval,
        )

    def execute(self, context: Context) -> dict[str, Any]:
        """Plan the placement, log it as a table and return it for XCom."""
        try:
            nodes = nodes_from_argument(self.nodes)
            if self.job_name is None:
                self.job_name = self._launched_job_name(context)
            if self.job_name is not None:
                request = self.capacity_request(nodes)
                timeout_at = None if request.timeout_s is None else epoch_now() + request.timeout_s
                return self._plan_on_shared_grid(context, request, timeout_at)
            planner = self._planner()
            held = self.grid_wait.capacity.held_by_others()
            if any(held.values()):
                self.log.warning(
                    "This plan names no job (no job_name, and no launch of its placement "
                    "names one), so it reserves nothing: it places around the nodes other "
                    "jobs hold now (%s), which may be taken before its launch.",
                    ", ".join(f"{n} on {p}" for p, n in sorted(held.items()) if n),
                )
            placement = planner.plan(
                nodes, leave_out=quarantine_from_record(self.nodes), held_by_others=held
            )
        except (GridCapacityError, NewerRecordError) as exc:  # a retry may succeed
            raise AirflowException(str(exc)) from None
        except ElasticGridError as exc:
            raise AirflowFailException(str(exc)) from None
        return self._placed(planner, placement)

    def _launched_job_name(self, context: Context) -> str | None:
        """The job the launch of this plan's placement starts (its rendered ``job_name``),
        when exactly one downstream launch reads this plan's output; else None."""
        names = set()
        for task in self.downstream_list:  # a LaunchOperator (not imported: it imports this)
            source = getattr(getattr(task, "placement", None), "operator", None)
            # the running task is a copy of the DAG's: compared by id
            if hasattr(task, "job_name") and getattr(source, "task_id", None) == self.task_id:
                names.add(task.render_template(task.job_name, context))
        if len(names) != 1:
            return None
        (name,) = names
        self.log.info(
            "Planning for job %s, which the launch of this placement starts (its job_name): "
            "the plan counts the nodes other jobs hold and reserves what it places.",
            name,
        )
        return str(name)

    def _placed(self, planner: GridPlanner, placement: Placement) -> dict[str, Any]:
        """Log the placement as a table and return it as plain JSON."""
        for provider, why in placement.left_out:
            self.log.info("Left out provider %s: %s", provider, why)
        for refusal in placement.launch_refusals:  # a launch of it will be refused
            self.log.warning("%s.", refusal[0].upper() + refusal[1:])
        self.log.info(
            "Placed %d nodes over %s (prefer=%s, max_spot_fraction=%g): $%.2f/h\n%s",
            placement.total_nodes,
            self.hook.settings.source,
            planner.prefer,
            planner.max_spot_fraction,
            placement.cost_per_hour,
            placement_table(placement),
        )
        return placement.model_dump()

    def _plan_on_shared_grid(
        self, context: Context, request: CapacityRequest, timeout_at: float | None
    ) -> dict[str, Any]:
        """Plan under the grid lock until granted: reserve, fail, or wait (``on_shortfall``)."""
        planner = self._planner()
        leave_out = quarantine_from_record(self.nodes)
        shared = self.grid_wait.until_granted(
            planner, request, leave_out, timeout_at, "execute_complete"
        )
        if shared.decision.verdict is Verdict.FAILED:
            raise AirflowFailException(shared.decision.reason)
        assert shared.placement is not None
        self.log.info(
            "Reserved %d of the %d nodes job %s asked for (launch %s); others: %s.",
            shared.placement.total_nodes,
            request.nodes,
            request.job,
            shared.launch_id,
            shared.holders,
        )
        context["ti"].xcom_push(key=RESERVATION_XCOM_KEY, value=shared.reservation)
        return self._placed(planner, shared.placement)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Woken by the trigger: plan again under the lock, or fail on its timeout."""
        try:
            request = self.capacity_request(nodes_from_argument(self.nodes))
            timeout_at = self.grid_wait.woken(request, event)
            return self._plan_on_shared_grid(context, request, timeout_at)
        except (GridCapacityError, NewerRecordError) as exc:  # a retry may succeed
            raise AirflowException(str(exc)) from None
        except ElasticGridError as exc:
            raise AirflowFailException(str(exc)) from None

    def on_kill(self) -> None:
        """A task killed while it waits for nodes takes its request out of the queue
        (:meth:`GridCapacityWait.leave_on_kill`); the wait then fails the task."""
        self.grid_wait.killed = True
        if self.job_name is None:
            return
        self.log.info("Task killed: job %s no longer waits for nodes.", self.job_name)
        self.grid_wait.leave_on_kill(self.job_name)
