"""One scale check of a job, as a pure transition: no Airflow, no files, no clock.

:class:`~elasticgrid_provider.hooks.check_manager.CheckManager` reads the job (a
:class:`JobSnapshot`), the stored :class:`ScaleState` and the new step-log chunks under
the job's lock and hands them to :class:`ScaleCheck` with the time; the
:class:`CheckOutcome` says what to write and whether the task holds, resizes, recovers,
finishes or gives up. The rules, in the order :meth:`ScaleCheck.failure` and
:meth:`ScaleCheck.run` apply them: ``docs/sensor.md`` ("What one check does", "On a
shared grid"); recovery from lost capacity: ``docs/recovery.md``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import timedelta
from typing import Any

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.fleet.ledger import GridLedger, release, used_nodes
from elasticgrid_provider.core.formatting import iso_time
from elasticgrid_provider.core.job import JobSnapshot, JobStatus
from elasticgrid_provider.core.launch_record import LaunchPhase
from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.policy.claim import SharedGrid, claim_the_grid
from elasticgrid_provider.core.policy.grid import GridShare
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.policy.rules import ScaleAction
from elasticgrid_provider.core.recovery import (
    LostPart,
    QuarantineEntry,
    RecoveryAction,
    RecoveryPolicy,
    decide_recovery,
    quarantine_reasons,
)
from elasticgrid_provider.core.samples import (
    DEFAULT_WINDOW_SIZE,
    MetricsWindow,
    StepSample,
    screen_times,
)
from elasticgrid_provider.core.state import (
    DEFAULT_HISTORY_LIMIT,
    DecisionRecord,
    JobEndedRecord,
    ScaleState,
    remember_recovery,
)
from elasticgrid_provider.core.step_log import StepLogChunk
from elasticgrid_provider.core.validation import (
    Choice,
    check_integer,
    check_number,
    number_from_text,
)

ARGUMENT_SOURCE = "samples argument"  # the cursor of handed-in samples: the next step to take
SKIPPED_LINES_SHOWN = 5  # bad step-log lines reported one by one per log; the rest counted


class CheckVerdict(Choice):
    """What the shell does after a check."""

    HOLD = "hold"  # keep waiting; the record goes to XCom
    RESIZE = "resize"  # end the wait: the job should run at ``target_nodes``
    FINISH = "finish"  # the job ended: record that, skip the resize downstream
    RECOVER = "recover"  # lost capacity: end the wait, re-plan and relaunch
    GIVE_UP = "give_up"  # lost capacity, not recovered again: stop the rest, fail


@dataclass(frozen=True)
class TaskIdentity:
    """Which task instance made the check (recorded in every decision's context)."""

    dag_id: str
    run_id: str
    task_id: str
    try_number: int
    map_index: int = -1  # Airflow's index of a mapped task instance; -1 when not mapped

    @classmethod
    def of(cls, ti: Any) -> TaskIdentity:
        """The identity of an Airflow task instance (``context["ti"]``)."""
        map_index = getattr(ti, "map_index", -1)
        index = map_index if isinstance(map_index, int) and map_index >= 0 else -1
        return cls(ti.dag_id, ti.run_id, ti.task_id, ti.try_number, index)


@dataclass(frozen=True)
class DeadlineChoice:
    """The deadline a decision works to: epoch seconds (None: no deadline) and its source."""

    at: float | None
    source: str


@dataclass(frozen=True)
class CheckOutcome:
    """What one check decided: the state to write, the record, ``(level, message)`` lines,
    and the grid ledger to write (None: no ledger was given)."""

    verdict: CheckVerdict
    state: ScaleState
    record: dict[str, Any]
    log: tuple[tuple[int, str], ...] = ()
    ledger: GridLedger | None = None

    @property
    def reason(self) -> str:
        """The record's human reason."""
        return str(self.record["reason"])


def unshared_root_sentence(job_name: str, jobs_root: str, state_key: str) -> str:
    """The error when a job's state exists but its files are not under this worker's root."""
    return (
        f"job {job_name!r} has a scale state in Variable {state_key!r} but no files under "
        f"{jobs_root} on this worker, so nothing was started: the jobs root must be shared "
        "by every worker that launches or checks the job (a shared filesystem, or its tasks "
        f"routed to one worker queue with queue=), or delete the Variable {state_key} if the "
        "job's files are gone for good"
    )


def optional_number(field: str, value: Any) -> float | None:
    """A templated number (numeric strings allowed), or None when unset; finite and >= 0."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return check_number(field, number_from_text(value))


def steps_left(remaining_steps: Any, total_steps: Any, window: MetricsWindow) -> float | None:
    """The steps the job has left: ``remaining_steps`` as given, or ``total_steps`` less the
    steps done by the window's newest sample (step ``n`` is the ``n + 1``-th), at least 0, and
    unknown (None) while the window is empty (a new job, or one just resized: its progress is
    not known yet); never both (one sentence)."""
    remaining = optional_number("remaining_steps", remaining_steps)
    total = optional_number("total_steps", total_steps)
    if total is None:
        return remaining
    if remaining is not None:
        raise ElasticGridError(
            f"remaining_steps {remaining:g} and total_steps {total:g} are both set; give one "
            "(total_steps: each check counts the steps left from the newest sample)"
        )
    if not window.samples:
        return None
    done = max(sample.step + 1 for sample in window.samples)
    return max(0.0, total - done)


def handed_in_samples(samples: Any) -> list[StepSample]:
    """The ``samples`` argument (a list of sample objects, or its JSON) as samples."""
    if isinstance(samples, str):  # a rendered template
        try:
            samples = json.loads(samples)
        except json.JSONDecodeError as exc:
            raise ElasticGridError(f"samples is not valid JSON: {exc.msg}") from None
    if not isinstance(samples, list):
        raise ElasticGridError(f"samples must be a list of sample objects, got {samples!r}")
    return [StepSample.model_validate(s, where=f"samples entry {i}") for i, s in enumerate(samples)]


def job_priority(value: Any) -> int:
    """A templated ``priority`` (numeric strings allowed) as a whole number, or one sentence."""
    return check_integer("priority", number_from_text(value), minimum=None)


def recovery_policy(max_recoveries: Any, recovery_window: Any, quarantine: Any) -> RecoveryPolicy:
    """The recovery policy from a task's rendered arguments (numeric strings, timedeltas)."""
    window_s, quarantine_s = (
        value.total_seconds() if isinstance(value, timedelta) else number_from_text(value)
        for value in (recovery_window, quarantine)
    )
    return RecoveryPolicy(number_from_text(max_recoveries), window_s, quarantine_s)


@dataclass(frozen=True)
class ScaleCheck:
    """The rules of one check of ``job_name`` (module docstring), with the task's settings."""

    job_name: str
    policy: ScalePolicy
    window_size: int = DEFAULT_WINDOW_SIZE
    history_limit: int = DEFAULT_HISTORY_LIMIT

    # -- rule 1: a job that cannot be checked --------------------------------------
    def failure(
        self,
        snapshot: JobSnapshot | None,
        *,
        jobs_root: str,
        unshared_message: str | None = None,
        failure_report: str | None = None,
    ) -> str | None:
        """Why the check must fail (one sentence, ``failure_report``'s log tails below it), or
        None; ``unshared_message`` is the sentence for a manifest missing while a state exists."""
        if snapshot is None:
            return unshared_message or (
                f"job {self.job_name!r} has no manifest under {jobs_root}; "
                "launch it with LaunchOperator first"
            )
        manifest = snapshot.manifest
        again = "launch it again with LaunchOperator"
        if manifest.state in (LaunchPhase.DOWN, LaunchPhase.LOST):  # stale samples: no decision
            reason = manifest.down_reason or "no reason recorded"
            how = "confirmed dead" if manifest.state == LaunchPhase.DOWN else "lost while starting"
            sentence = (
                f"job {self.job_name!r} is down, so there is nothing to scale: its launch "
                f"{manifest.launch_id} was {how} ({reason}); {again}"
            )
        elif manifest.state == LaunchPhase.STOPPING:  # the task that was stopping it ended
            running = [part.name for part in snapshot.parts if part.status == JobStatus.RUNNING]
            left = f"part(s) {', '.join(running)} still run" if running else "no rank is left"
            sentence = (
                f"job {self.job_name!r} was cut short while its launch {manifest.launch_id} "
                f"was being stopped ({manifest.down_reason or 'no reason recorded'}): the "
                f"task doing it ended before it recorded what came next, and {left}, so there "
                f"is nothing to scale; {again}"
            )
        elif snapshot.status == JobStatus.STOPPED and manifest.state != LaunchPhase.STOPPED:
            sentence = (
                f"job {self.job_name!r} has no rank left, yet its launch {manifest.launch_id} is "
                f"recorded {manifest.state}: its parts were stopped outside elasticgrid or "
                f"never started, so there is nothing to scale; {again}"
            )
        elif snapshot.status == JobStatus.FAILED:
            sentence = f"job {self.job_name!r} failed."
        else:
            return None
        return f"{sentence}\n{failure_report or ''}".rstrip()

    # -- rules 2-5 ----------------------------------------------------------------
    def run(
        self,
        state: ScaleState,
        snapshot: JobSnapshot,
        now: float,
        *,
        task: TaskIdentity,
        samples: Any = None,
        chunks: Sequence[StepLogChunk] = (),
        deadline: Callable[[], DeadlineChoice] = lambda: DeadlineChoice(None, "no deadline"),
        remaining_steps: Any = None,
        remaining_tokens: Any = None,
        total_steps: Any = None,
        planner: GridPlanner | None = None,
        lost: Sequence[LostPart] = (),
        recovery: RecoveryPolicy | None = None,
        grid: SharedGrid | None = None,
    ) -> CheckOutcome:
        """One check (module docstring): ``samples`` is the raw argument (None: use the step-log
        ``chunks``); ``deadline`` is called only when a decision is made; ``planner`` proposes
        placements and re-plans recoveries; ``total_steps``: the job's steps in all, instead of
        ``remaining_steps`` (:func:`steps_left`); ``grid``: the grid ledger (rule 5)."""
        log: list[tuple[int, str]] = []
        taken = self._take_samples(state, snapshot, now, samples, chunks, log)  # rule 2
        if lost:  # recover, give up, or wait (keeping ``state``, not ``taken``)
            recovering = recovery or RecoveryPolicy()
            return self._recover(state, taken, snapshot, now, task, lost, planner, recovering, log)
        if snapshot.status in (JobStatus.DONE, JobStatus.STOPPED):
            return self._job_ended(taken, snapshot, now, task, grid, log)
        # rule 5: the deadline (bad input raises its ElasticGridError here, before any write)
        choice = deadline()
        steps = steps_left(remaining_steps, total_steps, taken.window)
        tokens = optional_number("remaining_tokens", remaining_tokens)

        def decide(share: GridShare | None) -> DecisionRecord:
            return taken.decide(
                self.policy,
                now,
                deadline_at=choice.at,
                remaining_steps=steps,
                remaining_tokens=tokens,
                grid=share,
            )

        ledger = None
        if grid is None:
            record = decide(None)
        else:
            record, ledger = claim_the_grid(
                self.job_name, grid, taken.capacity, self.policy, decide, now, log
            )
        quarantine = taken.recovery.active_quarantine(now)
        others = used_nodes(ledger, except_job=self.job_name) if ledger is not None else None
        context = self._record_context(
            snapshot,
            record.decision.target_nodes,
            choice.source,
            now,
            task,
            planner,
            quarantine,
            others,
        )
        record = replace(record, context=context)
        hold = record.decision.action is ScaleAction.HOLD
        verdict = CheckVerdict.HOLD if hold else CheckVerdict.RESIZE
        remembered = taken.remember(record, now, self.history_limit)
        return CheckOutcome(verdict, remembered, record.model_dump(), tuple(log), ledger)

    def _recover(
        self,
        state: ScaleState,
        taken: ScaleState,
        snapshot: JobSnapshot,
        now: float,
        task: TaskIdentity,
        lost: Sequence[LostPart],
        planner: GridPlanner | None,
        recovery: RecoveryPolicy,
        log: list[tuple[int, str]],
    ) -> CheckOutcome:
        """Rule 3: the job lost capacity: recover it, give up, or wait (keeping ``state``, the
        state before this check took its samples, when it waits)."""
        if planner is None:
            raise ElasticGridError(f"job {self.job_name!r} lost capacity, but no planner was given")
        # bad input raises its ElasticGridError here, before anything is written
        decision = decide_recovery(
            job_name=self.job_name,
            launch_id=snapshot.manifest.launch_id,
            lost=lost,
            current_nodes=snapshot.nodes,
            min_nodes=self.policy.min_nodes,
            max_nodes=self.policy.max_nodes,
            memory=taken.recovery,
            policy=recovery,
            planner=planner,
            now=now,
        )
        context = self._record_context(snapshot, snapshot.nodes, "-", now, task, None)
        if decision.placement is not None:
            context["proposed_placement"] = decision.placement
            context["proposed_cost_per_hour"] = decision.placement["cost_per_hour"]
        event = decision.as_record(context)
        if decision.action is RecoveryAction.WAIT:
            return CheckOutcome(CheckVerdict.HOLD, state, event, tuple(log))
        taken = remember_recovery(taken, decision, event, self.history_limit)
        return CheckOutcome(CheckVerdict(decision.action), taken, event, tuple(log))

    def _job_ended(
        self,
        state: ScaleState,
        snapshot: JobSnapshot,
        now: float,
        task: TaskIdentity,
        grid: SharedGrid | None,
        log: list[tuple[int, str]],
    ) -> CheckOutcome:
        """Rule 4: the job is done or stopped: no decision, a ``job_ended`` record and entry,
        and its nodes released on a shared grid."""
        context = {
            "job_status": snapshot.status,
            "job_name": self.job_name,
            "decided_at_iso": iso_time(now),
            **asdict(task),
        }
        reason = f"job {self.job_name!r} is {snapshot.status}; there is nothing to scale"
        ended = JobEndedRecord(snapshot.nodes, reason, now, context).model_dump()
        state = state.remember_event(ended, now, self.history_limit)
        released = None
        if grid is not None:
            launch_id = snapshot.manifest.launch_id
            released = release(grid.ledger, self.job_name, now=now, launch_id=launch_id)
            log.append((logging.INFO, f"Released job {self.job_name}'s nodes on the grid."))
        return CheckOutcome(CheckVerdict.FINISH, state, ended, tuple(log), released)

    def _take_samples(
        self,
        state: ScaleState,
        snapshot: JobSnapshot,
        now: float,
        samples: Any,
        chunks: Sequence[StepLogChunk],
        log: list[tuple[int, str]],
    ) -> ScaleState:
        """Take the samples new since the last check; window them at the current size."""
        new_samples: list[StepSample] = []
        skipped = 0
        if samples is not None:
            next_step = state.cursor(ARGUMENT_SOURCE)
            fresh = [sample for sample in handed_in_samples(samples) if sample.step >= next_step]
            new_samples.extend(fresh)
            if fresh:
                state = state.with_cursor(ARGUMENT_SOURCE, max(s.step for s in fresh) + 1)
        else:
            for chunk in chunks:
                shown = chunk.skipped[:SKIPPED_LINES_SHOWN]
                notes = [*chunk.notes, *(f"Skipped a step-log line: {line}" for line in shown)]
                if len(chunk.skipped) > len(shown):
                    more = len(chunk.skipped) - len(shown)
                    notes.append(f"Skipped {more} more bad line(s) of {chunk.source}.")
                log.extend((logging.WARNING, note) for note in notes)
                skipped += len(chunk.skipped)
                new_samples.extend(chunk.samples)
                if chunk.lines_read:
                    first = state.log_cursor(chunk.source) is None
                    whence = " (first check: from its end, as far back as the window needs)"
                    read = f"Read {chunk.lines_read} new line(s) from {chunk.source}"
                    log.append((logging.INFO, f"{read}{whence if first else ''}."))
                state = state.with_cursor(chunk.source, chunk.cursor)
        new_samples, left_out = screen_times(new_samples, now)  # reported once: cursors moved
        log.extend((logging.WARNING, reason) for reason in left_out)
        current = snapshot.nodes
        if state.current_nodes is not None and state.current_nodes != current:
            changed = f"changed size {state.current_nodes} -> {current} since the last check"
            log.append((logging.INFO, f"Job {self.job_name} {changed}; starting a fresh window."))
        ignored = sum(1 for sample in new_samples if sample.nodes != current)
        if ignored:
            where = f"another size than the current {current} nodes"
            log.append((logging.INFO, f"Ignored {ignored} sample(s) measured at {where}."))
        state = state.observe(new_samples, current, now, self.window_size)
        return replace(state, skipped_lines=state.skipped_lines + skipped) if skipped else state

    def _record_context(
        self,
        snapshot: JobSnapshot,
        target: int,
        deadline_source: str,
        now: float,
        task: TaskIdentity,
        planner: GridPlanner | None,
        quarantine: Sequence[QuarantineEntry] = (),
        held_by_others: dict[str, int] | None = None,
    ) -> dict[str, Any]:
        """The task, the job, the placements and costs; the proposal leaves out ``quarantine``
        and the nodes other jobs hold on a shared grid (``held_by_others``)."""
        placement = snapshot.manifest.placement
        context: dict[str, Any] = {
            "decided_at_iso": iso_time(now),
            "job_name": self.job_name,
            "job_status": snapshot.status,
            "launch_id": snapshot.manifest.launch_id,
            "deadline_source": deadline_source,
            **asdict(task),
            "placement": placement.model_dump(),
            "cost_per_hour": placement.cost_per_hour,
        }
        if quarantine:
            context["quarantine"] = [entry.model_dump(mode="json") for entry in quarantine]
        if target != snapshot.nodes and planner is not None:
            try:
                proposed = planner.plan(
                    target,
                    leave_out=quarantine_reasons(quarantine),
                    held_by_others=held_by_others,
                )
                context["proposed_placement"] = proposed.model_dump()
                context["proposed_cost_per_hour"] = proposed.cost_per_hour
            except ElasticGridError as exc:
                context["proposed_placement_error"] = str(exc)
        return context
