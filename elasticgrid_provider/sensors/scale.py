"""ElasticScaleSensor: one audited scale decision per check, state kept in Airflow.

Each check (a poke, a reschedule, or a resume from the trigger) hands what the task
knows to :class:`~elasticgrid_provider.hooks.check_manager.CheckManager`, which takes
the job's lock (then the grid's), reads, runs the pure
:class:`~elasticgrid_provider.core.check.ScaleCheck` and writes the state; this module
turns its outcome into Airflow's terms. ``hold`` keeps the sensor waiting (its record in
XCom); ``scale_up``/``scale_down`` and ``recover`` end it with the decision record as its
return value (a PlanPlacementOperator's ``nodes``: ``check.output``); an ended job skips
the resize downstream; a job that cannot be checked or recovered fails the task in one
sentence. The rules, the records and the shared grid: ``docs/sensor.md``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import timedelta
from functools import cached_property
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue
from airflow.sdk.bases.xcom import BaseXCom
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowSensorTimeout, AirflowSkipException

from elasticgrid_provider.core.check import (
    CheckVerdict,
    DeadlineChoice,
    ScaleCheck,
    TaskIdentity,
    job_priority,
    recovery_policy,
)
from elasticgrid_provider.core.errors import JobFailedError  # re-exported, raised here
from elasticgrid_provider.core.formatting import decision_summary
from elasticgrid_provider.core.policy.parameters import (
    POLICY_PARAMETERS,
    ScalePolicy,
    policy_argument,
    policy_from,
)
from elasticgrid_provider.core.recovery import (
    DEFAULT_MAX_RECOVERIES,
    DEFAULT_QUARANTINE_S,
    DEFAULT_RECOVERY_WINDOW_S,
)
from elasticgrid_provider.core.state import DEFAULT_HISTORY_LIMIT
from elasticgrid_provider.deadlines import ResolvedDeadline, resolve_deadline
from elasticgrid_provider.hooks.check_manager import CheckInputs, CheckManager
from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook
from elasticgrid_provider.links import ScaleDecisionsLink
from elasticgrid_provider.triggers.job import MIN_DEFERRAL_S, JobStatusTrigger

MIN_RESCHEDULE_S = 15.0
"""The shortest reschedule the sensor makes; a shorter ``poke_interval`` checks in poke mode.

A reschedule keeps the try number, so when the scheduler reads the executor's "success"
of one check after the next check has been queued, it fails the task as killed
externally (apache/airflow #71172, fix proposed in PR #71194, not released).
"""


class ElasticScaleSensor(BaseSensorOperator):
    """Decide whether a running job should scale up, down or hold, and record why.

    :param job_name: the job to check (templated).
    :param policy: the scale policy: a :class:`~elasticgrid_provider.core.policy.parameters.ScalePolicy`,
        or a dict of its fields (templated: a dict, or its JSON, from Jinja or an XCom);
        unset fields keep their defaults. Each field is also accepted as a keyword argument
        (``min_nodes=2, ...``), but not together with ``policy``.
    :param window_size, history_limit: samples in the rolling window; decisions the state keeps.
    :param remaining_steps, remaining_tokens: work left, for deadline pressure (templated).
    :param total_steps: the job's steps in all (templated), instead of ``remaining_steps``:
        each check counts the steps left from the newest sample's step.
    :param deadline: a datetime or ISO string (templated); default: the DAG's ``deadline=``.
    :param samples: samples to use instead of the job's step logs (templated; a list of dicts
        or its JSON, e.g. an upstream XCom); a check takes those of steps it has not seen.
    :param max_recoveries: how many times a job that lost capacity is recovered within
        ``recovery_window`` before the check gives up (templated; 0: never recover).
    :param recovery_window, quarantine: seconds (or a timedelta, templated) over which
        ``max_recoveries`` counts, and for which a provider that lost capacity is left out.
    :param priority: the job's priority on a shared grid (templated; a whole number, higher
        goes first): its claim for more nodes is served before lower ones, and under deadline
        pressure it may ask strictly-lower-priority jobs to shrink (never below their
        ``min_nodes``). Jobs of equal priority never shrink for each other.
    :param providers: an inline grid for costing the proposed placement; default: the connection's.
    :param deferrable: wait in the triggerer; default ``[operators] default_deferrable``.
    :param elasticgrid_conn_id: the ``elasticgrid`` connection (JobManager root, grid).
    :return: the decision record (see ``DecisionRecord.model_dump``).
    """

    template_fields: Sequence[str] = (
        "job_name",
        "policy",
        "remaining_steps",
        "remaining_tokens",
        "total_steps",
        "deadline",
        "samples",
        "max_recoveries",
        "recovery_window",
        "quarantine",
        "providers",
        "priority",
    )
    ui_color = "#eef8e8"
    operator_extra_links = (ScaleDecisionsLink(),)

    def __init__(
        self,
        *,
        job_name: str,
        policy: ScalePolicy | dict[str, Any] | str | None = None,
        window_size: int = 10,
        remaining_steps: Any = None,
        remaining_tokens: Any = None,
        total_steps: Any = None,
        deadline: Any = None,
        samples: Any = None,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
        max_recoveries: Any = DEFAULT_MAX_RECOVERIES,
        recovery_window: Any = DEFAULT_RECOVERY_WINDOW_S,
        quarantine: Any = DEFAULT_QUARANTINE_S,
        providers: list[dict[str, Any]] | None = None,
        priority: Any = 0,
        mode: str = "reschedule",
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        elasticgrid_conn_id: str = ElasticGridHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        flat = {name: kwargs.pop(name) for name in POLICY_PARAMETERS if name in kwargs}
        super().__init__(mode=mode, **kwargs)
        self.job_name = job_name
        self.policy = policy_argument(policy, flat)
        self.window_size = window_size
        self.remaining_steps = remaining_steps
        self.remaining_tokens = remaining_tokens
        self.total_steps = total_steps
        self.deadline = deadline
        self.samples = samples
        self.history_limit = history_limit
        self.max_recoveries = max_recoveries
        self.recovery_window = recovery_window
        self.quarantine = quarantine
        self.providers = providers
        self.priority = priority
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
        """Poke/reschedule as usual; deferrable: check now, then wait in the triggerer.

        A wait shorter than a real scheduler can safely turn around (a deferral under
        :data:`MIN_DEFERRAL_S`, a reschedule under :data:`MIN_RESCHEDULE_S`) is done in
        poke mode instead, and the log says so: both race the executor's stale "success".
        """
        if self.deferrable and self.poke_interval >= MIN_DEFERRAL_S:
            return self._check_or_defer(context, started_at=time.time())
        if self.deferrable:  # a sooner trigger races the scheduler
            self.log.info(
                "poke_interval %.0fs is below the %.0fs a deferral must last to be safe on a "
                "real scheduler (apache/airflow #72716); checking job %s in the worker instead.",
                self.poke_interval,
                MIN_DEFERRAL_S,
                self.job_name,
            )
            self.mode = "poke"
        elif self.mode == "reschedule" and self.poke_interval < MIN_RESCHEDULE_S:
            self.log.info(
                "poke_interval %.0fs is below the %.0fs a reschedule must wait to be safe on a "
                "real scheduler (apache/airflow #71172); checking job %s in poke mode (the "
                "task keeps its worker slot between checks).",
                self.poke_interval,
                MIN_RESCHEDULE_S,
                self.job_name,
            )
            self.mode = "poke"
        return super().execute(context)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        """Resume after the trigger fired: check again (a failed job too), defer again on hold."""
        return self._check_or_defer(context, started_at=float(event["started_at"]))

    def _check_or_defer(self, context: Context, started_at: float) -> Any:
        record = self.check(context)
        if record is not None:
            return record
        remaining = self.timeout - (time.time() - started_at)
        if remaining <= 0:
            message = f"no scale decision for job {self.job_name!r} within {self.timeout:.0f}s"
            raise (AirflowSkipException if self.soft_fail else AirflowSensorTimeout)(message)
        wait = max(min(self.poke_interval, remaining), MIN_DEFERRAL_S)
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
            timeout=timedelta(seconds=remaining + self.poke_interval),
        )

    # -- the check ----------------------------------------------------------------
    @cached_property
    def scale_policy(self) -> ScalePolicy:
        """The task's policy, validated on first use (after rendering, never at parse time)."""
        return policy_from(self.policy)

    def check(self, context: Context) -> dict[str, Any] | None:
        """Run one check (module docstring); the record on a scale decision, None on hold."""
        rules = ScaleCheck(self.job_name, self.scale_policy, self.window_size, self.history_limit)
        priority = job_priority(self.priority)  # one sentence before anything is read
        resolved: list[ResolvedDeadline] = []

        def deadline() -> DeadlineChoice:  # resolved only when a decision is made
            found = resolve_deadline(self.deadline, context.get("dag"), context.get("dag_run"))
            resolved.append(found)
            return DeadlineChoice(found.timestamp, found.source)

        ti = context["ti"]
        inputs = CheckInputs(
            task=TaskIdentity.of(ti),
            deadline=deadline,
            recovery=lambda: recovery_policy(
                self.max_recoveries, self.recovery_window, self.quarantine
            ),
            priority=priority,
            poke_interval=self.poke_interval,
            samples=self.samples,
            remaining_steps=self.remaining_steps,
            remaining_tokens=self.remaining_tokens,
            total_steps=self.total_steps,
        )
        result = CheckManager(self.hook, self.job_name, rules, self.log).check(
            inputs, self.window_size
        )
        if result is None:  # the job or the grid stayed busy: the next check reads it
            return None
        outcome, report = result.outcome, result.report
        for found in resolved:
            for warning in found.warnings:
                self.log.warning("%s", warning)
            self.log.info("%s", found.describe(result.now))
        record = outcome.record
        self.log.log(
            logging.WARNING if result.lost else logging.INFO,
            "Decision for job %s: %s",
            self.job_name,
            decision_summary(record),
        )
        if outcome.verdict in (CheckVerdict.RESIZE, CheckVerdict.RECOVER):
            return record
        ti.xcom_push(key=BaseXCom.XCOM_RETURN_KEY, value=record)
        if outcome.verdict is CheckVerdict.FINISH:  # skip the resize downstream
            raise AirflowSkipException(outcome.reason)
        if outcome.verdict is CheckVerdict.GIVE_UP:  # the sentence alone; the log tails above
            if report:
                self.log.error("The lost ranks of job %s logged last:\n%s", self.job_name, report)
            raise JobFailedError(outcome.reason)
        return None
