"""ElasticScaleSensor: one audited scale decision per check, state kept in Airflow.

Each check (a poke, a reschedule, or a resume from the trigger):

1. takes the job's lock (:meth:`ElasticGridHook.job_lock`), so two checks of
   one job never interleave: the second waits, then reads what the first
   wrote (its cooldown included) and holds. Airflow has no compare-and-set on
   Variables; the lock makes the read-decide-write of the state one step;
2. reads the job's status: a job whose launch was confirmed down (its
   manifest's ``state``) fails the sensor with the ``down_reason``, so no
   decision is made on the samples it left; a job that lost part of its
   capacity (a part failed, or ranks down) is recovered
   (:mod:`elasticgrid_provider.core.recovery`): the check decides ``recover``,
   quarantines the lost providers, and ends with a record whose
   ``target_nodes`` and ``quarantine`` the downstream re-plan and relaunch
   use, the same safe resize path as any resize; past ``max_recoveries``
   within ``recovery_window``, or with no capacity left, it stops what is left
   and fails with one sentence; a failed job fails it with its error, a
   job that ended ends it (skipping the resize downstream) with a record
   saying so, a job that was never launched fails it;
3. reads only the step-log lines that arrived since the last check (the
   cursors in the state), skipping and counting malformed lines; the first
   check of a log reads from its end only as many samples as the window
   holds; truncation and rotation are recognised by the file's identity
   (:mod:`elasticgrid_provider.core.step_log`), so no step counts twice;
4. observes them (:meth:`ScaleState.observe`): only samples measured at the
   job's current size enter the window (a resize starts a fresh window), and
   what they measured joins the job's capacity memory;
5. resolves the deadline (:mod:`elasticgrid_provider.deadlines`) and decides
   (:meth:`ScaleState.decide`, the
   :class:`~elasticgrid_provider.core.scheduler.ElasticScheduler`);
6. remembers the decision (:meth:`ScaleState.remember`: cooldown, recent
   recommendations, bounded history), writes the state Variable and leaves
   one record per check in XCom ``return_value``. ``elasticgrid simulate --timeline``
   and the policy benchmark run the same observe -> decide -> remember.

The state Variable is read and written through the hook. A Variable that
cannot be used (empty, not JSON, ``null``, another job's, malformed) fails
the check with one sentence and is never overwritten: replacing it with a
fresh state would lose the cooldown and the history.

``hold`` keeps the sensor waiting; ``scale_up``/``scale_down`` ends it with
the decision record as its return value, which a PlanPlacementOperator takes
as ``nodes`` (``check.output``). A hold's record is pushed to the same key
(downstream never runs on a hold), so every check leaves exactly one record.
Repeated holds are folded into one history entry with a count
(:meth:`ScaleState.with_record`); the end of the job is a history entry too.
The log line is :func:`~elasticgrid_provider.core.formatting.decision_summary`
(thresholds included), and the task's extra link opens the job's page in the
"Scale decisions" view.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from functools import cached_property
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue
from airflow.sdk.bases.xcom import BaseXCom
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowSensorTimeout, AirflowSkipException

from elasticgrid_provider.core.clock import epoch_now
from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.formatting import decision_summary, iso_time
from elasticgrid_provider.core.job import JobSnapshot
from elasticgrid_provider.core.launch_record import LAUNCH_DOWN
from elasticgrid_provider.core.recovery import (
    DEFAULT_MAX_RECOVERIES,
    DEFAULT_QUARANTINE_S,
    DEFAULT_RECOVERY_WINDOW_S,
    GIVE_UP,
    WAIT,
    LostPart,
    QuarantineEntry,
    RecoveryPolicy,
    decide_recovery,
    quarantine_reasons,
    remember_recovery,
)
from elasticgrid_provider.core.samples import StepSample
from elasticgrid_provider.core.scheduler import SCHEDULER_PARAMETERS, ElasticScheduler, ScaleAction
from elasticgrid_provider.core.state import (
    DEFAULT_HISTORY_LIMIT,
    JOB_ENDED_RULE,
    ScaleState,
)
from elasticgrid_provider.core.step_log import read_step_log
from elasticgrid_provider.core.validation import check_number, number_from_text
from elasticgrid_provider.deadlines import resolve_deadline
from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook
from elasticgrid_provider.plugins.links import ScaleDecisionsLink
from elasticgrid_provider.shared_root import unshared_jobs_root_message
from elasticgrid_provider.triggers.job import MIN_DEFERRAL_S, JobStatusTrigger

# the cursor key of samples handed in through the ``samples`` argument: its value is the
# next step number to take, so each DAG run may hand in a new, overlapping list
ARGUMENT_SOURCE = "samples argument"
# how long a check waits for a job that a launch or another check is busy with
LOCK_WAIT_S = 60.0
# bad step-log lines reported one by one per log and check; the rest are counted
SKIPPED_LINES_SHOWN = 5


class JobFailedError(RuntimeError):
    """The checked job failed or was never launched.

    Deliberately not an ``AirflowException``, like the ``ElasticGridError`` a
    bad argument raises: ``soft_fail`` (meant for a check that found no reason
    to scale before its timeout) turns Airflow's failures into skips, and a
    failed job or a misconfigured check must never pass as a skip.
    """


def _optional_number(field: str, value: Any) -> float | None:
    """A templated number (numeric strings allowed), or None when unset; finite and >= 0."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return check_number(field, number_from_text(value))


class ElasticScaleSensor(BaseSensorOperator):
    """Decide whether a running job should scale up, down or hold, and record why.

    :param job_name: the job to check (templated).
    :param min_nodes, max_nodes, scale_up_factor, scale_down_factor, cooldown_s,
        scale_down_cooldown_s, target_queue_fraction, idle_queue_fraction,
        idle_step_fraction, target_step_s, min_samples, startup_s, horizon_s,
        resize_margin, headroom, tolerance, drain_s, scale_down_window_s,
        deadline_margin, final_stretch_s, scaling_loss: the scheduler's
        parameters (see :mod:`elasticgrid_provider.core.scheduler`); unset
        ones keep ElasticScheduler's defaults.
    :param window_size: how many samples the rolling window keeps.
    :param remaining_steps: work left, in steps, for deadline pressure (templated).
    :param remaining_tokens: work left, in tokens, for deadline pressure (templated).
    :param deadline: explicit deadline, a datetime or ISO string (templated);
        default: the DAG's ``deadline=`` alerts.
    :param samples: samples handed in (a list of dicts or its JSON, e.g. an upstream
        XCom) instead of reading the job's step logs (templated); each check takes
        the samples whose step it has not seen yet.
    :param max_recoveries: how many times a job that lost capacity is recovered within
        ``recovery_window`` before the check gives up (templated; 0: never recover).
    :param recovery_window: seconds (or a timedelta) over which ``max_recoveries`` counts
        (templated).
    :param quarantine: seconds (or a timedelta) a provider that lost capacity is left out
        of placements (templated).
    :param history_limit: how many decisions the state Variable keeps.
    :param providers: an inline grid for costing the proposed placement; default: the connection's.
    :param deferrable: wait between checks in the triggerer; default
        ``[operators] default_deferrable``.
    :param elasticgrid_conn_id: the ``elasticgrid`` connection (JobManager root, grid).
    :return: the decision record (see ``DecisionRecord.to_dict``).
    """

    template_fields: Sequence[str] = (
        "job_name",
        "remaining_steps",
        "remaining_tokens",
        "deadline",
        "samples",
        "max_recoveries",
        "recovery_window",
        "quarantine",
    )
    ui_color = "#eef8e8"
    operator_extra_links = (ScaleDecisionsLink(),)

    def __init__(
        self,
        *,
        job_name: str,
        min_nodes: int | None = None,
        max_nodes: int | None = None,
        scale_up_factor: float | None = None,
        scale_down_factor: float | None = None,
        cooldown_s: float | None = None,
        scale_down_cooldown_s: float | None = None,
        target_queue_fraction: float | None = None,
        idle_queue_fraction: float | None = None,
        idle_step_fraction: float | None = None,
        target_step_s: float | None = None,
        min_samples: int | None = None,
        startup_s: float | None = None,
        horizon_s: float | None = None,
        resize_margin: float | None = None,
        headroom: float | None = None,
        tolerance: float | None = None,
        drain_s: float | None = None,
        scale_down_window_s: float | None = None,
        deadline_margin: float | None = None,
        final_stretch_s: float | None = None,
        scaling_loss: float | None = None,
        window_size: int = 10,
        remaining_steps: Any = None,
        remaining_tokens: Any = None,
        deadline: Any = None,
        samples: Any = None,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
        max_recoveries: Any = DEFAULT_MAX_RECOVERIES,
        recovery_window: Any = DEFAULT_RECOVERY_WINDOW_S,
        quarantine: Any = DEFAULT_QUARANTINE_S,
        providers: list[dict[str, Any]] | None = None,
        mode: str = "reschedule",
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        elasticgrid_conn_id: str = ElasticGridHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(mode=mode, **kwargs)
        self.job_name = job_name
        arguments = locals()
        self.scheduler_parameters: dict[str, Any] = {
            name: arguments[name] for name in SCHEDULER_PARAMETERS if arguments[name] is not None
        }
        self.window_size = window_size
        self.remaining_steps = remaining_steps
        self.remaining_tokens = remaining_tokens
        self.deadline = deadline
        self.samples = samples
        self.history_limit = history_limit
        self.max_recoveries = max_recoveries
        self.recovery_window = recovery_window
        self.quarantine = quarantine
        self.providers = providers
        self.deferrable = deferrable
        self.elasticgrid_conn_id = elasticgrid_conn_id

    @cached_property
    def hook(self) -> ElasticGridHook:
        """The hook, built on first use (never at DAG parse time)."""
        return ElasticGridHook(self.elasticgrid_conn_id, providers=self.providers)

    # -- the Airflow entry points -------------------------------------------------
    def poke(self, context: Context) -> PokeReturnValue:
        """One check: done with the record on a scale decision, not done on hold."""
        record = self.check(context)
        return PokeReturnValue(is_done=record is not None, xcom_value=record)

    def execute(self, context: Context) -> Any:
        """Poke/reschedule as usual; deferrable: check now, then wait in the triggerer."""
        if not self.deferrable:
            return super().execute(context)
        if self._poke_seconds() < MIN_DEFERRAL_S:
            # a trigger firing this soon after deferral races the scheduler (MIN_DEFERRAL_S)
            self.log.info(
                "poke_interval %.0fs is below the %.0fs a deferral must last to be safe on a "
                "real scheduler (apache/airflow #72716); checking job %s in the worker instead.",
                self._poke_seconds(),
                MIN_DEFERRAL_S,
                self.job_name,
            )
            self.mode = "poke"
            return super().execute(context)
        return self._check_or_defer(context, started_at=time.time())

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        """Resume after the trigger fired: check again, and defer again on hold."""
        # a failed job is checked like any other: lost capacity is recovered, else it fails
        return self._check_or_defer(context, started_at=float(event["started_at"]))

    def _check_or_defer(self, context: Context, started_at: float) -> Any:
        record = self.check(context)
        if record is not None:
            return record
        remaining = self._timeout_seconds() - (time.time() - started_at)
        if remaining <= 0:
            message = (
                f"no scale decision for job {self.job_name!r} within {self._timeout_seconds():.0f}s"
            )
            if self.soft_fail:
                raise AirflowSkipException(message)
            raise AirflowSensorTimeout(message)
        # never shorter than MIN_DEFERRAL_S, even when little time is left before the timeout
        wait = max(min(self._poke_seconds(), remaining), MIN_DEFERRAL_S)
        self.log.info(
            "Holding; next check of job %s in %.0fs (in the triggerer).", self.job_name, wait
        )
        self.defer(
            trigger=JobStatusTrigger(
                job_name=self.job_name,
                jobs_root=str(self.hook.jobs_root),
                poll_interval=min(wait, 5.0),
                wake_after_s=wait,
                min_wait_s=MIN_DEFERRAL_S,
                payload={"started_at": started_at},
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=remaining + self._poke_seconds()),
        )

    def _timeout_seconds(self) -> float:
        timeout = self.timeout
        return timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)

    def _poke_seconds(self) -> float:
        interval = self.poke_interval
        return interval.total_seconds() if isinstance(interval, timedelta) else float(interval)

    # -- the check ----------------------------------------------------------------
    @cached_property
    def scheduler(self) -> ElasticScheduler:
        """The scheduler with this task's parameters (validated on first use)."""
        return ElasticScheduler(**self.scheduler_parameters)

    def check(self, context: Context) -> dict[str, Any] | None:
        """Run one check (module docstring); the record on a scale decision, None on hold."""
        scheduler = self.scheduler
        hook = self.hook
        with hook.job_lock(self.job_name, timeout=LOCK_WAIT_S) as held:
            if not held:
                self.log.info(
                    "Job %s is busy (another task holds its lock for over %.0fs); "
                    "holding until the next check.",
                    self.job_name,
                    LOCK_WAIT_S,
                )
                return None
            snapshot = hook.job_snapshot(self.job_name)
            if snapshot is None:
                raise JobFailedError(
                    unshared_jobs_root_message(self.job_name, hook.jobs_root)
                    or f"job {self.job_name!r} has no manifest under {hook.jobs_root}; "
                    "launch it with LaunchOperator first"
                )
            if snapshot.manifest.state == LAUNCH_DOWN:  # its samples are stale: nothing to decide
                raise JobFailedError(self._down_message(snapshot, hook.failure_report(snapshot)))
            lost = hook.lost_parts(snapshot)
            if lost:
                return self._recover(context, snapshot, lost)
            if snapshot.status == "failed":
                raise JobFailedError(self._failure_message(hook.failure_report(snapshot)))
            state = hook.read_scale_state(self.job_name)
            now = epoch_now()
            state = self._take_new_samples(state, snapshot, now)
            if snapshot.status in ("done", "stopped"):
                self._finish_ended_job(context, state, snapshot, now)
            try:
                deadline = resolve_deadline(
                    self.deadline, context.get("dag"), context.get("dag_run")
                )
                record = state.decide(
                    scheduler,
                    now,
                    deadline_at=deadline.timestamp,
                    remaining_steps=_optional_number("remaining_steps", self.remaining_steps),
                    remaining_tokens=_optional_number("remaining_tokens", self.remaining_tokens),
                )
            except ElasticGridError as exc:  # bad input: fail clearly, write nothing
                raise ElasticGridError(str(exc)) from None
            decision = record.decision
            for warning in deadline.warnings:
                self.log.warning("%s", warning)
            self.log.info("%s", deadline.describe(now))
            record = replace(
                record,
                context=self._record_context(
                    context,
                    snapshot,
                    decision.target_nodes,
                    deadline.source,
                    now,
                    quarantine=state.recovery.active_quarantine(now),
                ),
            )
            state = state.remember(record, now, self.history_limit)
            hook.write_scale_state(state)
        record_json = record.to_dict()
        self.log.info("Decision for job %s: %s", self.job_name, decision_summary(record_json))
        if decision.action is ScaleAction.HOLD:  # a change is the return value itself
            context["ti"].xcom_push(key=BaseXCom.XCOM_RETURN_KEY, value=record_json)
            return None
        return record_json

    def _take_new_samples(self, state: ScaleState, snapshot: JobSnapshot, now: float) -> ScaleState:
        """Read the samples that arrived since the last check; window them at the current size."""
        new_samples: list[StepSample] = []
        skipped = 0
        if self.samples is not None:
            next_step = state.cursor(ARGUMENT_SOURCE)
            fresh = [sample for sample in self._handed_in_samples() if sample.step >= next_step]
            new_samples.extend(fresh)
            if fresh:
                state = state.with_cursor(ARGUMENT_SOURCE, max(s.step for s in fresh) + 1)
        else:
            for path in self.hook.step_logs(snapshot):
                cursor = state.log_cursor(str(path))
                chunk = read_step_log(path, cursor, tail=self.window_size, nodes=snapshot.nodes)
                for note in chunk.notes:
                    self.log.warning("%s", note)
                for line in chunk.skipped[:SKIPPED_LINES_SHOWN]:
                    self.log.warning("Skipped a step-log line: %s", line)
                if len(chunk.skipped) > SKIPPED_LINES_SHOWN:
                    self.log.warning(
                        "Skipped %d more bad line(s) of %s.",
                        len(chunk.skipped) - SKIPPED_LINES_SHOWN,
                        path,
                    )
                skipped += len(chunk.skipped)
                new_samples.extend(chunk.samples)
                if chunk.lines_read:
                    self.log.info(
                        "Read %d new line(s) from %s%s.",
                        chunk.lines_read,
                        path,
                        " (first check: from its end, as far back as the window needs)"
                        if cursor is None
                        else "",
                    )
                state = state.with_cursor(chunk.source, chunk.cursor)
        current = snapshot.nodes
        if state.current_nodes is not None and state.current_nodes != current:
            self.log.info(
                "Job %s changed size %s -> %d since the last check; starting a fresh window.",
                self.job_name,
                state.current_nodes,
                current,
            )
        ignored = sum(1 for sample in new_samples if sample.nodes != current)
        if ignored:
            self.log.info(
                "Ignored %d sample(s) measured at another size than the current %d nodes.",
                ignored,
                current,
            )
        state = state.observe(new_samples, current, now, self.window_size)
        return replace(state, skipped_lines=state.skipped_lines + skipped)

    def _handed_in_samples(self) -> list[StepSample]:
        samples = self.samples
        if isinstance(samples, str):  # a rendered template
            try:
                samples = json.loads(samples)
            except json.JSONDecodeError as exc:
                raise ElasticGridError(f"samples is not valid JSON: {exc.msg}") from None
        if not isinstance(samples, list):
            raise ElasticGridError(f"samples must be a list of sample objects, got {samples!r}")
        return [
            StepSample.from_dict(sample, where=f"samples entry {position}")
            for position, sample in enumerate(samples)
        ]

    def _record_context(
        self,
        context: Context,
        snapshot: JobSnapshot,
        target: int,
        deadline_source: str,
        now: float,
        quarantine: Sequence[QuarantineEntry] = (),
    ) -> dict[str, Any]:
        """What surrounded the decision: the task, the job, the placements and their cost.

        An active ``quarantine`` is recorded (the re-plan leaves those providers out).
        """
        ti = context["ti"]
        placement = snapshot.manifest.placement
        record: dict[str, Any] = {
            "decided_at_iso": iso_time(now),
            "job_name": self.job_name,
            "job_status": snapshot.status,
            "launch_id": snapshot.manifest.launch_id,
            "deadline_source": deadline_source,
            "dag_id": ti.dag_id,
            "run_id": ti.run_id,
            "task_id": ti.task_id,
            "try_number": ti.try_number,
            "placement": placement.to_dict(),
            "cost_per_hour": placement.cost_per_hour,
        }
        if quarantine:
            record["quarantine"] = [entry.model_dump(mode="json") for entry in quarantine]
        if target != snapshot.nodes:
            try:
                proposed = self.hook.get_planner().plan(
                    target, leave_out=quarantine_reasons(quarantine)
                )
                record["proposed_placement"] = proposed.to_dict()
                record["proposed_cost_per_hour"] = proposed.cost_per_hour
            except ElasticGridError as exc:
                record["proposed_placement_error"] = str(exc)
        return record

    def _recovery_policy(self) -> RecoveryPolicy:
        """The recovery budget and quarantine from the (rendered) arguments."""

        def seconds(value: Any) -> Any:
            return (
                value.total_seconds() if isinstance(value, timedelta) else number_from_text(value)
            )

        recoveries = number_from_text(self.max_recoveries)
        if isinstance(recoveries, float) and recoveries.is_integer():  # "3" from a template
            recoveries = int(recoveries)
        return RecoveryPolicy.checked(
            max_recoveries=recoveries,
            recovery_window_s=seconds(self.recovery_window),
            quarantine_s=seconds(self.quarantine),
        )

    def _recover(
        self, context: Context, snapshot: JobSnapshot, lost: tuple[LostPart, ...]
    ) -> dict[str, Any] | None:
        """Recover a job that lost capacity (the caller holds the job's lock).

        ``recover`` ends the check with its record (the re-plan and relaunch
        downstream do the rest); ``wait`` holds (this launch's recovery was
        already decided); ``give_up`` stops what is left and fails the task.
        """
        hook = self.hook
        now = time.time()
        state = self._take_new_samples(hook.read_scale_state(self.job_name), snapshot, now)
        thresholds = self.scheduler.thresholds()
        try:
            decision = decide_recovery(
                job_name=self.job_name,
                launch_id=snapshot.manifest.launch_id,
                lost=lost,
                current_nodes=snapshot.nodes,
                min_nodes=int(thresholds["min_nodes"]),
                max_nodes=int(thresholds["max_nodes"]),
                memory=state.recovery,
                policy=self._recovery_policy(),
                planner=hook.get_planner(),
                now=now,
            )
        except ElasticGridError as exc:  # bad input: fail clearly, write nothing
            raise ElasticGridError(str(exc)) from None
        record_context = self._record_context(context, snapshot, snapshot.nodes, "-", now)
        if decision.placement is not None:
            record_context["proposed_placement"] = decision.placement
            record_context["proposed_cost_per_hour"] = decision.placement["cost_per_hour"]
        record = decision.to_dict(record_context)
        self.log.warning("Decision for job %s: %s", self.job_name, decision_summary(record))
        context["ti"].xcom_push(key=BaseXCom.XCOM_RETURN_KEY, value=record)
        if decision.action == WAIT:
            return None
        hook.write_scale_state(remember_recovery(state, decision, record, self.history_limit))
        if decision.action == GIVE_UP:
            report = hook.failure_report(snapshot)
            stopped = hook.give_up(snapshot.manifest, decision.reason)
            if stopped:
                self.log.info("Stopped what was left of job %s: %s", self.job_name, stopped)
            raise JobFailedError(f"{decision.reason}\n{report}".rstrip())
        return record

    def _finish_ended_job(
        self,
        context: Context,
        state: ScaleState,
        snapshot: JobSnapshot,
        now: float,
    ) -> None:
        """A job that ended needs no decision: record that and skip the resize downstream."""
        ti = context["ti"]
        summary: dict[str, Any] = {
            "action": ScaleAction.HOLD.value,
            "current_nodes": snapshot.nodes,
            "target_nodes": snapshot.nodes,
            "rule": JOB_ENDED_RULE,
            "reason": f"job {self.job_name!r} is {snapshot.status}; there is nothing to scale",
            "decided_at": now,
        }
        summary["context"] = {
            "job_status": snapshot.status,
            "job_name": self.job_name,
            "decided_at_iso": iso_time(now),
            "dag_id": ti.dag_id,
            "run_id": ti.run_id,
            "task_id": ti.task_id,
            "try_number": ti.try_number,
            "readable": {"summary": decision_summary(summary)},
        }
        self.hook.write_scale_state(state.end_job(summary, now, self.history_limit))
        ti.xcom_push(key=BaseXCom.XCOM_RETURN_KEY, value=summary)
        self.log.info("Decision for job %s: %s", self.job_name, decision_summary(summary))
        raise AirflowSkipException(summary["reason"])

    def _down_message(self, snapshot: JobSnapshot, report: str | None) -> str:
        """One sentence with the ``down_reason``; the failed ranks' log tail below it."""
        manifest = snapshot.manifest
        reason = manifest.down_reason or "no reason recorded"
        sentence = (
            f"job {self.job_name!r} is down, so there is nothing to scale: its launch "
            f"{manifest.launch_id} was confirmed dead ({reason}); launch it again with LaunchOperator"
        )
        return f"{sentence}\n{report or ''}".rstrip()

    def _failure_message(self, report: str | None) -> str:
        return f"job {self.job_name!r} failed.\n{report or ''}".rstrip()
