"""GridCapacityTrigger: wait, in the triggerer, until a queued plan would fit the grid.

It reads the ledger without its lock (in a thread, off the event loop) and fires
``granted``, ``timeout`` or ``refused``; a look that fires nothing renews the request's
lease. The rules: docs/operators.md ("Sharing the grid with other jobs"),
docs/fleet-ledger.md ("The ledger"), docs/deploying.md ("The triggerer").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from airflow.triggers.base import TriggerEvent

from elasticgrid_provider.core.clock import epoch_now
from elasticgrid_provider.core.errors import ElasticGridError, NewerRecordError
from elasticgrid_provider.core.validation import Choice
from elasticgrid_provider.triggers.base import ElasticGridTrigger

RENEW_LOCK_WAIT_S = 5.0  # how long a look waits for the grid lock to renew the lease


class CapacityEventStatus(Choice):
    """The status word of a capacity event."""

    GRANTED = "granted"  # the request would be granted now: plan again under the lock
    TIMEOUT = "timeout"  # ``timeout_at`` passed first
    REFUSED = "refused"  # a newer release wrote the request: ``reason`` says so


@dataclass(eq=False, repr=False)
class GridCapacityTrigger(ElasticGridTrigger):
    """Fire when the queued request would be granted, or once its timeout passed.

    :param jobs_root: the JobManager root whose grid ledger the request waits in.
    :param request: the request, as
        :meth:`~elasticgrid_provider.core.fleet.ledger.CapacityRequest.model_dump` wrote it.
    :param capacities: the nodes of each provider the plan may use (``{name: max_nodes}``).
    :param poll_interval: seconds between reads of the ledger.
    :param timeout_at: epoch seconds after which the wait ends (None: no timeout).
    :param min_wait_s: fire no sooner than this after the deferral.
    """

    jobs_root: str
    request: dict[str, Any]
    capacities: dict[str, int]
    poll_interval: float = 30.0
    timeout_at: float | None = None
    min_wait_s: float = 0.0

    def _capacity(self) -> Any:
        from elasticgrid_provider.hooks.grid_capacity import GridCapacity
        from elasticgrid_provider.hooks.grid_ledger import GridLedgerStore

        return GridCapacity(GridLedgerStore(self.jobs_root))

    def _check(self) -> dict[str, Any] | None:
        """The event to fire now, or None (runs in a thread: it reads files)."""
        from elasticgrid_provider.core.fleet.ledger import CapacityRequest

        try:
            request = CapacityRequest.model_validate(self.request)
        except NewerRecordError as exc:
            refused = CapacityEventStatus.REFUSED.value
            return {"status": refused, "job": self.request.get("job"), "reason": str(exc)}
        capacity = self._capacity()
        if capacity.would_grant(request, self.capacities):
            granted = CapacityEventStatus.GRANTED.value
            return {"status": granted, "job": request.job, "timeout_at": self.timeout_at}
        if self.timeout_at is not None and epoch_now() >= self.timeout_at:
            return {
                "status": CapacityEventStatus.TIMEOUT.value,
                "job": request.job,
                "holders": capacity.holders(request.job),
                "timeout_at": self.timeout_at,
            }
        # renewed at every look, so a request whose trigger is gone (a triggerer lost) lapses
        # from the queue instead of holding its place, and its shrinks, for ever
        try:
            if capacity.renew(request, timeout=RENEW_LOCK_WAIT_S):
                self.log.warning(
                    "Job %s's request had lapsed from the grid queue while this trigger was "
                    "away; it is queued again, at the back of its priority.",
                    request.job,
                )
        except TimeoutError:  # the lease outlasts several looks: the next one renews it
            self.log.info(
                "The grid ledger was busy; job %s renews its lease next time.", request.job
            )
        except (ElasticGridError, OSError) as exc:  # the wait goes on; the task plans in full
            self.log.warning(
                "Could not renew job %s's place in the grid queue (%s); it keeps waiting, and "
                "its place lapses unless a later look renews it.",
                request.job,
                exc,
            )
        return None

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Poll the ledger until the request would be granted or the timeout passed."""
        started = time.monotonic()
        while True:
            event = await asyncio.to_thread(self._check)
            if event is not None:
                held_back = self.min_wait_s - (time.monotonic() - started)
                if held_back > 0:  # MIN_DEFERRAL_S: firing this soon races the scheduler
                    await asyncio.sleep(held_back)
                    continue
                yield TriggerEvent(event)
                return
            await asyncio.sleep(self.poll_interval)

    async def on_kill(self) -> None:
        """The deferred task was killed: its request leaves the queue."""
        job = str(self.request["job"])
        self.log.info("Deferred task killed: job %s no longer waits for nodes.", job)
        await asyncio.to_thread(self._capacity().dequeue, job)
