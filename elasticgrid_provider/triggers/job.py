"""JobStatusTrigger: wait, in the triggerer, for a job to end (or for the next check).

It polls the job's status (in a thread, off the event loop) and fires when the job ended,
or once ``wake_after_s`` has passed (a deferrable scale sensor's next check). A job that
another task is starting or stopping has not ended, whatever its parts read meanwhile. The
rules: docs/operators.md ("LaunchOperator"), docs/sensor.md ("Modes"), docs/deploying.md
("The triggerer").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import TriggerEvent

from elasticgrid_provider.core.job import JobStatus
from elasticgrid_provider.core.validation import Choice
from elasticgrid_provider.triggers.base import ElasticGridTrigger

if TYPE_CHECKING:
    from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook


class JobEventStatus(Choice):
    """The status word of a job event: the job's :class:`JobStatus`, or ``missing``."""

    LAUNCHING = JobStatus.LAUNCHING.value
    RUNNING = JobStatus.RUNNING.value
    DONE = JobStatus.DONE.value
    FAILED = JobStatus.FAILED.value
    STOPPED = JobStatus.STOPPED.value
    MISSING = "missing"  # the job has no manifest: it was never launched here
    CHANGING = "changing"  # a task holding the job's lock is starting or stopping it

    @property
    def is_terminal(self) -> bool:
        """Whether the wait is over: the job is missing, or its status is terminal."""
        if self is JobEventStatus.CHANGING:
            return False
        return self is JobEventStatus.MISSING or JobStatus(self.value).is_terminal


MIN_DEFERRAL_S = 15.0
"""The shortest time, in seconds, between a deferral and its event. On Airflow 3.3.2 a
trigger firing within seconds gets the resumed task marked FAILED with no error in its
log, as the deferring try's late "success" is read after the resumed try was queued
(apache/airflow#72716, #71580; fix proposed in #72767). Seen at 2 s, not at 15 s: the
scale sensor checks in the worker instead, and waits hold their event back."""


def job_event(hook: ElasticGridHook, job_name: str) -> dict[str, Any]:
    """The event payload: the job's status and identity, and a failure report if it failed."""
    from elasticgrid_provider.hooks.job_reports import failure_report

    store = hook.job_store
    snapshot = store.job_snapshot(job_name)
    if snapshot is None:
        missing = JobEventStatus.MISSING.value
        return {"job_name": job_name, "status": missing, "job": None, "woke": False}
    status = snapshot.status
    # a job another task is starting or stopping (a resize, a user's stop) has not ended: a
    # stop's first killed rank reads failed, a resize's new parts read stopped until they start
    if snapshot.manifest.state.is_unfinished and _locked_by_another_task(hook, job_name):
        changing = JobEventStatus.CHANGING.value
        return {"job_name": job_name, "status": changing, "job": None, "woke": False}
    event: dict[str, Any] = {"job_name": job_name, "status": status.value, "woke": False}
    event["job"] = snapshot.model_dump()
    if status is JobStatus.FAILED:
        event["failure_report"] = failure_report(store, snapshot)
    return event


def _locked_by_another_task(hook: ElasticGridHook, job_name: str) -> bool:
    """Whether a task holds the job's lock now (a waiting task never holds it)."""
    with hook.job_store.job_lock(job_name, timeout=0) as held:
        return not held


def event_ended(event: dict[str, Any]) -> bool:
    """Whether the event says the wait is over (:attr:`JobEventStatus.is_terminal`)."""
    return JobEventStatus(event["status"]).is_terminal


@dataclass(eq=False, repr=False)
class JobStatusTrigger(ElasticGridTrigger):
    """Fire when the job ends, or after ``wake_after_s`` seconds if it is set.

    :param job_name, jobs_root: the job, and the JobManager root it was launched under.
    :param poll_interval, wake_after_s: seconds between status checks, and until firing anyway.
    :param min_wait_s: fire no sooner, even when the job has ended (:data:`MIN_DEFERRAL_S`).
    :param payload: plain JSON copied into the event (what the resumed task needs): the event,
        not ``defer(kwargs=)``, since Airflow 3.3.2's ``dag.test()`` drops those kwargs on
        resume while a real triggerer keeps them; the event works on both.
    :param stop_on_kill, launch_id: when the deferred task is killed, stop ``launch_id``, the
        launch it started (a later resize runs on); LaunchOperator's: a sensor's kill stops nothing.
    """

    job_name: str
    jobs_root: str
    poll_interval: float = 5.0
    wake_after_s: float | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    stop_on_kill: bool = False
    min_wait_s: float = 0.0
    launch_id: str | None = None

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
        manager = self._hook().launch_manager(self.job_name, self.launch_id)
        await asyncio.to_thread(manager.stop)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Poll until the job ends or the wake-up time passes, then fire once."""
        hook = self._hook()
        started = time.monotonic()
        while True:
            event = await asyncio.to_thread(job_event, hook, self.job_name)
            woke = self.wake_after_s is not None and time.monotonic() - started >= self.wake_after_s
            if event_ended(event) or woke:
                held_back = self.min_wait_s - (time.monotonic() - started)
                if held_back > 0:  # MIN_DEFERRAL_S: firing this soon races the scheduler
                    await asyncio.sleep(held_back)
                    continue
                yield TriggerEvent({**self.payload, **event, "woke": woke})
                return
            await asyncio.sleep(self.poll_interval)
