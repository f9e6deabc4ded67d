"""JobStatusTrigger: wait, in the triggerer, for a job to end (or for the next check).

The trigger polls the job's status every ``poll_interval`` seconds (in a
thread, off the event loop) and fires when the job ended: ``done``,
``failed``, ``stopped``, or ``missing`` (no manifest); with ``wake_after_s``,
also once that long has passed (a deferrable scale sensor's next check).

Everything the resumed task needs is in the event, not in ``defer(kwargs=)``:
Airflow 3.3.2's ``dag.test()`` drops those kwargs on resume (SPEC 6.1), and a
real triggerer keeps them; the event works on both.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from elasticgrid_provider.core.job import JobStatus

if TYPE_CHECKING:
    from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook

ENDED_STATUSES = ("done", "failed", "stopped", "missing")

MIN_DEFERRAL_S = 15.0
"""The shortest time, in seconds, between a deferral and its event. On Airflow 3.3.2 a
trigger firing within seconds gets the resumed task marked FAILED with no error in its
log, as the deferring try's late "success" is read after the resumed try was queued
(apache/airflow#72716, #71580; fix proposed in #72767). Seen at 2 s, not at 15 s (SPEC
6.5): the scale sensor checks in the worker instead, and waits hold their event back."""


def job_event(hook: ElasticGridHook, job_name: str) -> dict[str, Any]:
    """The event payload: the job's status and identity, and a failure report if it failed."""
    snapshot = hook.job_snapshot(job_name)
    if snapshot is None:
        return {"job_name": job_name, "status": "missing", "job": None, "woke": False}
    event: dict[str, Any] = {"job_name": job_name, "status": snapshot.status, "woke": False}
    event["job"] = snapshot.to_dict()
    if snapshot.status == JobStatus.FAILED:
        event["failure_report"] = hook.failure_report(snapshot)
    return event


class JobStatusTrigger(BaseTrigger):
    """Fire when the job ends, or after ``wake_after_s`` seconds if it is set.

    :param job_name, jobs_root: the job, and the JobManager root it was launched under.
    :param poll_interval, wake_after_s: seconds between status checks, and until firing anyway.
    :param min_wait_s: fire no sooner, even when the job has ended (:data:`MIN_DEFERRAL_S`).
    :param payload: plain JSON copied into the event (what the resumed task needs).
    :param stop_on_kill, launch_id: when the deferred task is killed, stop ``launch_id``, the
        launch it started (a later resize runs on); LaunchOperator's: a sensor's kill stops nothing.
    """

    def __init__(
        self,
        job_name: str,
        jobs_root: str,
        poll_interval: float = 5.0,
        wake_after_s: float | None = None,
        payload: dict[str, Any] | None = None,
        stop_on_kill: bool = False,
        min_wait_s: float = 0.0,
        launch_id: str | None = None,
    ) -> None:
        super().__init__()
        self.job_name = job_name
        self.jobs_root = jobs_root
        self.poll_interval = poll_interval
        self.wake_after_s = wake_after_s
        self.payload = payload or {}
        self.stop_on_kill = stop_on_kill
        self.min_wait_s = min_wait_s
        self.launch_id = launch_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Classpath and arguments, so the triggerer can rebuild this trigger."""
        names = inspect.signature(type(self)).parameters
        classpath = f"{type(self).__module__}.{type(self).__qualname__}"
        return classpath, {name: getattr(self, name) for name in names}

    def _hook(self) -> ElasticGridHook:
        from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook

        return ElasticGridHook(jobs_root=self.jobs_root)

    async def on_kill(self) -> None:
        """The deferred task was killed: stop the job if this trigger owns it."""
        if not self.stop_on_kill or self.launch_id is None:
            return
        self.log.info(
            "Deferred task killed: stopping job %s (launch %s).", self.job_name, self.launch_id
        )
        await asyncio.to_thread(self._hook().stop_launch, self.job_name, self.launch_id)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Poll until the job ends or the wake-up time passes, then fire once."""
        hook = self._hook()
        started = time.monotonic()
        while True:
            event = await asyncio.to_thread(job_event, hook, self.job_name)
            woke = self.wake_after_s is not None and time.monotonic() - started >= self.wake_after_s
            if event["status"] in ENDED_STATUSES or woke:
                held_back = self.min_wait_s - (time.monotonic() - started)
                if held_back > 0:  # MIN_DEFERRAL_S: firing this soon races the scheduler
                    await asyncio.sleep(held_back)
                    continue
                yield TriggerEvent({**self.payload, **event, "woke": woke})
                return
            await asyncio.sleep(self.poll_interval)
