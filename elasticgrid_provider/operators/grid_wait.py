"""GridCapacityWait: plan under the grid lock until a request is granted, for a plan or a launch.

One loop for both tasks that ask the shared grid for nodes: the plan of a job, and a launch
whose placement no longer fits. Each look plans under the grid's lock
(:meth:`~elasticgrid_provider.hooks.grid_capacity.GridCapacity.plan`): granted, the placement
is reserved and returned; failed (``on_shortfall="fail"``), the caller fails in one sentence;
waiting, the request is in the grid's queue and the task waits, deferred in the triggerer
(:class:`~elasticgrid_provider.triggers.capacity.GridCapacityTrigger`) or polling in the
worker, then looks again; ``capacity_timeout`` and a kill take the request out of the queue.
The wait is an object of its task (``task.grid_wait``) that owns what the wait holds: whether
this process queued the request, whether it is inside the grid's lock (where ``on_kill`` must
not take it again), and whether the task was killed. docs/fleet.md ("Sharing rules").
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from airflow.sdk.exceptions import AirflowException

from elasticgrid_provider.core.clock import epoch_now
from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.fleet.sharing import Verdict
from elasticgrid_provider.triggers.capacity import CapacityEventStatus, GridCapacityTrigger
from elasticgrid_provider.triggers.job import MIN_DEFERRAL_S

if TYPE_CHECKING:
    from datetime import timedelta

    from airflow.triggers.base import BaseTrigger

    from elasticgrid_provider.core.fleet.ledger import CapacityRequest
    from elasticgrid_provider.core.planner import GridPlanner
    from elasticgrid_provider.hooks.grid_capacity import GridCapacity, SharedPlan

KILL_CHECK_S = 0.5  # how often a wait for nodes looks whether the task was killed
KILL_LOCK_WAIT_S = 2.0  # how long on_kill waits for the grid lock (SIGKILL follows SIGTERM)


class WaitingTask(Protocol):
    """What the wait uses of its operator."""

    @property
    def hook(self) -> Any:
        """The operator's hook (its ``jobs_root``)."""

    @property
    def log(self) -> Any:
        """The task's logger."""

    poll_interval: float
    deferrable: bool
    capacity_timeout: Any

    def defer(
        self,
        *,
        trigger: BaseTrigger,
        method_name: str,
        kwargs: dict[str, Any] | None = None,
        timeout: timedelta | int | float | None = None,
    ) -> NoReturn:
        """BaseOperator's."""


class GridCapacityWait:
    """The wait for nodes of one task (module docstring)."""

    def __init__(self, task: WaitingTask) -> None:
        self.task = task
        self.queued = False  # this process put the job's request in the queue
        self.planning = False  # inside the grid lock: on_kill must not take it again
        self.killed = False

    @cached_property
    def capacity(self) -> GridCapacity:
        """The grid ledger's steps for the task, built on first use."""
        from elasticgrid_provider.hooks.grid_capacity import GridCapacity
        from elasticgrid_provider.hooks.grid_ledger import GridLedgerStore

        return GridCapacity(GridLedgerStore(self.task.hook.jobs_root))

    def until_granted(
        self,
        planner: GridPlanner,
        request: CapacityRequest,
        leave_out: Mapping[str, str],
        timeout_at: float | None,
        method_name: str,
    ) -> SharedPlan:
        """Plan under the lock until granted (returned, reserved) or failed (returned, the
        caller fails); waiting defers to ``method_name`` or polls (module docstring)."""
        while True:
            self.planning = True
            try:
                shared = self.capacity.plan(planner, request, leave_out=leave_out)
            finally:
                self.planning = False
            verdict = shared.decision.verdict
            if self.killed:
                self._leave_killed(request.job, shared.launch_id)
            if verdict is not Verdict.WAITING:
                self.queued = False
                return shared
            self.queued = True
            task = self.task
            task.log.info(
                "Job %s waits for %d nodes (at least %d, priority %d): place %d in the grid "
                "queue; the grid is held by %s.",
                request.job,
                request.nodes,
                request.min_nodes,
                request.priority,
                shared.decision.queue_position,
                shared.holders,
            )
            for shrink in shared.shrinks:
                task.log.info(
                    "Asked job %s (lower priority) to shrink to %d nodes for job %s.",
                    shrink.job,
                    shrink.to_nodes,
                    shrink.by_job,
                )
            if timeout_at is not None and epoch_now() >= timeout_at:
                self.timed_out(request.job, shared.holders)
            if task.deferrable and not self.killed:
                task.defer(
                    trigger=GridCapacityTrigger(
                        jobs_root=str(task.hook.jobs_root),
                        request=request.model_dump(),
                        capacities={
                            p.name: p.max_nodes
                            for p in planner.providers
                            if p.name not in leave_out
                        },
                        poll_interval=task.poll_interval,
                        timeout_at=timeout_at,
                        min_wait_s=MIN_DEFERRAL_S,
                    ),
                    method_name=method_name,
                )
            self._sleep()

    def woken(self, request: CapacityRequest, event: Mapping[str, Any]) -> float | None:
        """A capacity event: fail on a refusal or the timeout; else the wait's ``timeout_at``."""
        status = CapacityEventStatus(event["status"])
        if status is CapacityEventStatus.REFUSED:
            raise AirflowException(event["reason"])  # a retry may meet another triggerer
        if status is CapacityEventStatus.TIMEOUT:
            self.timed_out(request.job, event.get("holders") or "nobody")
        timeout_at = event.get("timeout_at")
        return None if timeout_at is None else float(timeout_at)

    def _sleep(self) -> None:
        """Wait ``poll_interval`` seconds, in short steps so that a kill ends the wait soon."""
        deadline = time.monotonic() + self.task.poll_interval
        while not self.killed and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, KILL_CHECK_S))

    def _leave_killed(self, job: str, launch_id: str) -> None:
        """The task was killed while it planned or waited: no request, no reservation left."""
        if launch_id:
            self.capacity.drop_reservation(job, launch_id)
        self.capacity.dequeue(job)
        self.queued = False
        raise AirflowException(
            f"the task was killed while job {job!r} waited for nodes; it left the grid queue"
        )

    def timed_out(self, job: str, holders: str) -> None:
        """Leave the queue and fail (an :class:`ElasticGridError`, no retry): the wait for
        nodes lasted ``capacity_timeout``."""
        self.capacity.dequeue(job)
        self.queued = False
        raise ElasticGridError(
            f"job {job!r} waited capacity_timeout {self.task.capacity_timeout} seconds for nodes "
            f"in vain and left the grid queue; the grid is held by {holders}"
        )

    def leave_on_kill(self, job: str) -> None:
        """``on_kill``: take the job's request out of the queue at once when the wait sleeps,
        else right after the transaction in progress (which holds the grid lock this process
        must not take twice); the wait then fails the task."""
        self.killed = True
        if self.planning or not self.queued:
            return  # the wait leaves the queue itself, right after the plan in progress
        try:
            self.capacity.dequeue(job, timeout=KILL_LOCK_WAIT_S)
            self.queued = False
        except TimeoutError:
            self.task.log.warning(
                "The grid ledger was busy; the wait leaves the queue when it ends."
            )
