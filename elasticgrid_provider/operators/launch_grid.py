"""LaunchGrid: what a launch asks of the shared grid beyond its own reservation.

A placement that no longer fits is planned again as its plan would now; the plan's
reservation is given back when the launch fails before it started anything; a start-up
loss is quarantined in the job's scale state. The rules: docs/operators.md
("LaunchOperator"), docs/recovery.md ("Recovery details").
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import Context

from elasticgrid_provider.core.clock import epoch_now
from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.fleet.sharing import DEFAULT_SHORTFALL_MODE, Verdict
from elasticgrid_provider.core.formatting import placement_table
from elasticgrid_provider.core.placement import Placement
from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.recovery import quarantine_from_record
from elasticgrid_provider.core.validation import number_from_text
from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook
from elasticgrid_provider.operators.grid_wait import GridCapacityWait
from elasticgrid_provider.operators.plan import (
    RESERVATION_XCOM_KEY,
    PlanPlacementOperator,
    capacity_request,
)

if TYPE_CHECKING:
    from elasticgrid_provider.core.fleet.ledger import CapacityRequest
    from elasticgrid_provider.core.recovery import LostPart
    from elasticgrid_provider.hooks.grid_capacity import SharedPlan

RESUME_METHOD = "execute_after_capacity"


class LaunchGrid:
    """The launch's steps on the shared grid (docs/operators.md, "LaunchOperator")."""

    job_name: str
    placement: Any
    on_shortfall: Any
    quarantine: Any
    upstream_list: Any
    hook: Any
    log: Any
    poll_interval: float
    deferrable: bool
    capacity_timeout: Any

    @cached_property
    def grid_wait(self) -> GridCapacityWait:
        """The task's wait for nodes on the shared grid, built on first use."""
        return GridCapacityWait(self)  # type: ignore[arg-type]  # the LaunchOperator

    def _upstream_plan(self) -> PlanPlacementOperator | None:
        plans = [task for task in self.upstream_list if isinstance(task, PlanPlacementOperator)]
        return plans[0] if len(plans) == 1 else None

    def grid_planner(self, context: Context, placement: Placement) -> GridPlanner:
        """The grid the placement came from: the upstream plan's (its rendered ``providers``,
        spot cap and preference), else the placement's own providers."""
        plan = self._upstream_plan()
        if plan is None:
            return GridPlanner(providers=tuple(share.provider for share in placement.assignments))
        providers = plan.render_template(plan.providers, context)
        hook = ElasticGridHook(plan.elasticgrid_conn_id, providers=providers)
        spot = number_from_text(plan.render_template(plan.max_spot_fraction, context))
        return hook.get_planner(spot, plan.render_template(plan.prefer, context))

    def shortfall_request(self, context: Context, placement: Placement) -> CapacityRequest:
        """The placement's size as a request for the grid, with the plan's rendered priority,
        ``min_nodes`` (at most the placement's size), ``on_shortfall`` and
        ``capacity_timeout`` unless the launch sets its own."""
        plan = self._upstream_plan()

        def plans(name: str, default: Any) -> Any:
            return default if plan is None else plan.render_template(getattr(plan, name), context)

        nodes = placement.total_nodes
        least = number_from_text(plans("min_nodes", None))
        if isinstance(least, (int, float)) and not isinstance(least, bool) and least > nodes:
            least = nodes  # take_what_fits may have placed fewer than the plan's nodes
        mode = self.on_shortfall
        timeout = self.capacity_timeout
        return capacity_request(
            self.job_name,
            nodes,
            priority=plans("priority", 0),
            min_nodes=least,
            on_shortfall=plans("on_shortfall", DEFAULT_SHORTFALL_MODE) if mode is None else mode,
            capacity_timeout=plans("capacity_timeout", None) if timeout is None else timeout,
            poll_interval=self.poll_interval,
        )

    def _leave_out(self, context: Context, left_out: Mapping[str, str]) -> dict[str, str]:
        """The providers a re-plan leaves out: the plan's decision's quarantine, the job's
        scale state's (:func:`job_quarantine`), and ``left_out``."""
        from elasticgrid_provider.hooks.startup_loss import job_quarantine

        plan = self._upstream_plan()
        decided = {} if plan is None else plan.render_template(plan.nodes, context)
        store = self.hook.job_store
        return {
            **quarantine_from_record(decided),
            **job_quarantine(store, self.job_name),
            **left_out,
        }

    def replan_on_shortfall(
        self, context: Context, placement: Placement, refusal: str, left_out: Mapping[str, str]
    ) -> Placement:
        """The placement did not fit (``refusal``): plan again, and wait or fail per
        ``on_shortfall`` (as at the plan); the new placement, reserved for the job."""
        request = self.shortfall_request(context, placement)
        self.log.warning(
            "%s. Its plan's placement no longer fits the grid: planning job %s again "
            "(on_shortfall=%s).",
            refusal[0].upper() + refusal[1:].rstrip("."),
            self.job_name,
            request.mode.value,
        )
        timeout_at = None if request.timeout_s is None else epoch_now() + request.timeout_s
        return self._granted(context, request, placement, left_out, timeout_at)

    def _granted(
        self,
        context: Context,
        request: CapacityRequest,
        placement: Placement,
        left_out: Mapping[str, str],
        timeout_at: float | None,
    ) -> Placement:
        planner = self.grid_planner(context, placement)
        leave_out = self._leave_out(context, left_out)
        shared = self.grid_wait.until_granted(
            planner, request, leave_out, timeout_at, RESUME_METHOD
        )
        return self._replanned(request, shared)

    def resume_replan(self, context: Context, event: Mapping[str, Any]) -> Placement:
        """Woken by the grid's trigger: plan again (wait again, or fail on its timeout)."""
        placement = Placement.model_validate(self.placement)
        request = self.shortfall_request(context, placement)
        timeout_at = self.grid_wait.woken(request, event)
        return self._granted(context, request, placement, {}, timeout_at)

    def _replanned(self, request: CapacityRequest, shared: SharedPlan) -> Placement:
        if shared.decision.verdict is Verdict.FAILED:
            raise ElasticGridError(
                f"job {request.job!r} was not launched: its plan's placement no longer fits "
                f"the grid and on_shortfall is 'fail' ({shared.decision.reason})"
            )
        assert shared.placement is not None
        self.log.info(
            "Planned job %s again and reserved %d of its %d nodes (launch %s); others: %s.\n%s",
            request.job,
            shared.placement.total_nodes,
            request.nodes,
            shared.launch_id,
            shared.holders,
            placement_table(shared.placement),
        )
        return shared.placement

    def remember_startup_loss(self, lost: tuple[LostPart, ...]) -> None:
        """Quarantine the providers that took parts away while the launch started in the job's
        scale state, as a later loss is."""
        from elasticgrid_provider.core.check import recovery_policy
        from elasticgrid_provider.core.recovery import (
            DEFAULT_MAX_RECOVERIES,
            DEFAULT_RECOVERY_WINDOW_S,
        )
        from elasticgrid_provider.hooks.startup_loss import quarantine_startup_loss

        policy = recovery_policy(DEFAULT_MAX_RECOVERIES, DEFAULT_RECOVERY_WINDOW_S, self.quarantine)
        quarantine_startup_loss(self.hook.job_store, self.job_name, lost, policy.quarantine_s)

    def give_back_plan_reservation(self, context: Context) -> None:
        """The launch failed: the reservation its upstream plan made for this job goes back to
        the grid now (no rank of this launch holds it; a launch that got further replaced it
        with its own, which the launch manager already released)."""
        plans = [
            task.task_id for task in self.upstream_list if isinstance(task, PlanPlacementOperator)
        ]
        if not plans:
            return
        pulled = context["ti"].xcom_pull(task_ids=plans, key=RESERVATION_XCOM_KEY)
        for reservation in pulled if isinstance(pulled, list) else [pulled]:
            if not isinstance(reservation, Mapping) or reservation.get("job") != self.job_name:
                continue
            try:
                dropped = self.grid_wait.capacity.drop_reservation(
                    self.job_name, str(reservation["launch_id"])
                )
            except (OSError, TimeoutError, ValueError) as exc:
                self.log.warning("The plan's reservation stays until its lease ends: %s", exc)
                continue
            if dropped:
                self.log.info(
                    "Gave back the nodes the plan reserved for job %s (launch %s): %s.",
                    self.job_name,
                    reservation["launch_id"],
                    ", ".join(f"{n} on {p}" for p, n in sorted(dropped.items())),
                )
