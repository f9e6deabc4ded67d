"""The scale state of one job, as it is kept between checks (docs/sensor.md, "Records").

Each check may run in a new process on another worker, so everything a decision depends on is
in one JSON document, one Airflow Variable per job (:func:`state_variable_key`): the window,
the step-log cursors, the cooldown, the capacity memory, the recent recommendations, the
bounded history (repeated holds folded into one entry, oldest holds dropped first) and the
recovery memory, under :data:`STATE_LAYOUT`. A document that is not a whole, valid state of
the expected job is refused in one sentence, never replaced. One check, the same in the sensor,
``elasticgrid simulate`` and the benchmarks: :meth:`ScaleState.observe`, :meth:`ScaleState.decide`,
:meth:`ScaleState.remember` (:meth:`ScaleState.advance` runs all three).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import fields, replace
from typing import Annotated, Any

from pydantic import (
    Field,
    PlainSerializer,
    PlainValidator,
    field_validator,
    model_serializer,
    model_validator,
)

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.formatting import decision_summary, iso_time, rounded
from elasticgrid_provider.core.policy.controller import decide
from elasticgrid_provider.core.policy.decision import CooldownClock, Recommendation, ScaleDecision
from elasticgrid_provider.core.policy.grid import GridShare
from elasticgrid_provider.core.policy.load import estimate_load
from elasticgrid_provider.core.policy.memory import NO_MEASUREMENTS, CapacityMemory
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.policy.rules import EventRule, ScaleAction
from elasticgrid_provider.core.records import Extras, ForwardCompatible, RecordLayout, extras_field
from elasticgrid_provider.core.recovery import (
    NO_RECOVERIES,
    PAST_RECOVERIES_KEPT,
    PastRecovery,
    RecoveryAction,
    RecoveryDecision,
    RecoveryMemory,
)
from elasticgrid_provider.core.samples import DEFAULT_WINDOW_SIZE, MetricsWindow, StepSample
from elasticgrid_provider.core.step_log import LogCursor, cut_report
from elasticgrid_provider.core.validation import (
    Count,
    Finite,
    JsonModel,
    NonNegative,
    Positive,
    Text,
    check_integer,
    check_mapping,
    model,
    none_as_default,
)

STATE_LAYOUT = RecordLayout("scale state", major=2, migrated=(1,))
"""2: ``capacity`` and ``recent``; a version 1 state (neither) is migrated on load: no
measurements, no recent recommendations, its history as recorded."""
DEFAULT_HISTORY_LIMIT = 20
RECORD_ANNOTATIONS = ("context", "inputs", "hold_run")  # keys of an entry beside the decision
RECENT_LIMIT = 200  # recent recommendations kept, however short the checks' interval
MEASUREMENT_MIN_SAMPLES = 3  # fewer samples do not replace a fuller measurement at a size


def state_variable_key(job_name: str) -> str:
    """The Airflow Variable that holds ``job_name``'s scale state."""
    return f"elasticgrid_scale_state__{job_name}"


@model
class DecisionInputs(ForwardCompatible, JsonModel):
    """Everything a decision was computed from; :meth:`decide` reproduces it exactly."""

    scheduler: ScalePolicy  # the policy (the record's key, kept for the records already written)
    window: MetricsWindow
    now: Finite
    current_nodes: Positive
    cooldown: CooldownClock = Field(default_factory=CooldownClock)
    deadline_at: Finite | None = None
    remaining_steps: NonNegative | None = None
    remaining_tokens: NonNegative | None = None
    capacity: CapacityMemory = NO_MEASUREMENTS
    recent: tuple[Recommendation, ...] = ()
    grid: GridShare | None = None
    extras: Extras = extras_field()

    @model_validator(mode="before")
    @classmethod
    def _older_nulls(cls, data: Any) -> Any:
        return none_as_default(data, "cooldown", "capacity", "recent")

    def decide(self) -> ScaleDecision:
        """Run the policy on these inputs (the fields after ``window`` are its keywords)."""
        options = {f.name: getattr(self, f.name) for f in fields(self)[2:] if f.name != "extras"}
        return decide(self.scheduler, self.window, **options)


POLICY_V2_INPUT_FIELDS = ("capacity", "recent")  # inputs only the restart-aware policy records


def recorded_by_older_policy(entry: Any) -> bool:
    """Whether an entry lacks :data:`POLICY_V2_INPUT_FIELDS` (schema 1; its replay may differ)."""
    inputs = entry.get("inputs") if isinstance(entry, dict) else None
    return isinstance(inputs, dict) and any(name not in inputs for name in POLICY_V2_INPUT_FIELDS)


@model
class JobEndedRecord(JsonModel):
    """The history entry of a check that found its job ended (done or stopped): no decision.
    Its JSON has a decision's shape (a hold at the job's size, rule ``job_ended``), so the
    history, the CLI and the UI read it like any other entry."""

    nodes: Count
    reason: Text
    decided_at: Finite
    context: dict[str, Any] = Field(default_factory=dict)

    @model_serializer(mode="plain")
    def _as_entry(self) -> dict[str, Any]:
        entry = {
            "action": ScaleAction.HOLD.value,
            "current_nodes": self.nodes,
            "target_nodes": self.nodes,
            "rule": EventRule.JOB_ENDED.value,
            "reason": self.reason,
            "decided_at": self.decided_at,
        }
        readable = {"summary": decision_summary(entry)}
        return {**entry, "context": {**self.context, "readable": readable}}


@model
class DecisionRecord(JsonModel):
    """A decision, its inputs, and what surrounded it (job, deadline source, placements);
    its JSON (XCom, history) is the decision's fields beside ``context`` and ``inputs``."""

    OWNER = "decision record"  # errors name their own path: decision.rule, inputs.now

    decision: ScaleDecision
    inputs: DecisionInputs
    context: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _from_flat(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "decision" in data:
            return data
        plain = {k: v for k, v in data.items() if k not in RECORD_ANNOTATIONS}
        context = data.get("context") or {}
        return {"decision": plain, "inputs": data.get("inputs"), "context": context}

    @model_serializer(mode="plain")
    def _flat(self) -> dict[str, Any]:
        decision = self.decision.model_dump()
        context = {**self.context, "readable": readable_fields(decision)}
        return {**decision, "context": context, "inputs": self.inputs.model_dump()}

    def replay(self) -> ScaleDecision:
        """Recompute the decision from its recorded inputs."""
        return self.inputs.decide()


def _stored_history(value: Any) -> tuple[dict[str, Any], ...]:
    """The stored decision history: a list of decision objects (kept as they are, not copied)."""
    if not isinstance(value, (list, tuple)):
        raise ElasticGridError(
            f"scale state history must be a list of decisions, got {cut_report(repr(value), 80)}"
        )
    for position, entry in enumerate(value):
        if not isinstance(entry, dict):  # the sentence; a dict needs no check (10,000 of them)
            check_mapping(f"scale state history entry {position}", entry)
    return tuple(value)


@model
class ScaleState(ForwardCompatible, JsonModel):
    """One job's window, cursors, cooldown clock and decision history (module docstring)."""

    LAYOUT = STATE_LAYOUT

    job_name: Text
    window: MetricsWindow = Field(default_factory=MetricsWindow)
    cursors: dict[str, int | LogCursor] = Field(default_factory=dict)
    cooldown: CooldownClock = Field(default_factory=CooldownClock)
    current_nodes: Positive | None = None
    history: Annotated[
        tuple[dict[str, Any], ...],
        PlainValidator(_stored_history, json_schema_input_type=list[dict[str, Any]]),
        PlainSerializer(list, return_type=list[dict[str, Any]]),
    ] = ()
    skipped_lines: Count = 0
    revision: Count = 0
    updated_at: Finite | None = None
    capacity: CapacityMemory = NO_MEASUREMENTS
    recent: tuple[Recommendation, ...] = ()
    recovery: RecoveryMemory = NO_RECOVERIES
    extras: Extras = extras_field()

    @classmethod
    def _migrate(cls, data: dict[str, Any], major: int) -> dict[str, Any]:
        """Version 1 (and any older null) gains the defaults."""
        return none_as_default(data, "cooldown", "capacity", "recent", "recovery")

    @classmethod
    def _remedy(cls, data: Any) -> str:
        job = state_variable_key(str(data.get("job_name", "<job>")))
        return f"; delete the job's Variable {job} to start afresh"

    @field_validator("cursors", mode="before")
    @classmethod
    def _stored_cursors(cls, value: Any) -> Any:
        """``{source: cursor}`` (sorted): a next step, an older byte offset, or a LogCursor."""
        check_mapping("scale state cursors", value)
        cursors: dict[str, int | LogCursor] = {}
        for source, cursor in sorted(value.items()):
            where = f"scale state cursor {source!r}"
            if isinstance(cursor, dict):
                cursor = LogCursor.model_validate(cursor, where=where)
            elif not isinstance(cursor, LogCursor):
                cursor = check_integer(where, cursor)
            cursors[str(source)] = cursor
        return cursors

    def cursor(self, source: str) -> int:
        """The position already consumed in ``source`` (0 when never read)."""
        value = self.cursors.get(source, 0)
        return value.offset if isinstance(value, LogCursor) else value

    def log_cursor(self, source: str) -> LogCursor | None:
        """Where the step log ``source`` was last read, or None when it never was."""
        value = self.cursors.get(source)
        return LogCursor(offset=value) if isinstance(value, int) else value

    def with_cursor(self, source: str, offset: int | LogCursor) -> ScaleState:
        """A copy with ``source``'s cursor moved to ``offset``."""
        return replace(self, cursors={**self.cursors, source: offset})

    # -- the transition of one check: observe -> decide -> remember ------------------

    def observe(
        self,
        samples: Iterable[StepSample],
        current_nodes: int,
        now: float,
        window_size: int = DEFAULT_WINDOW_SIZE,
    ) -> ScaleState:
        """Window the samples at ``current_nodes`` (afresh after a resize); measure capacity."""
        resized = self.current_nodes not in (None, current_nodes)
        window = MetricsWindow(window_size, () if resized else self.window.samples)
        window = window.add(*(sample for sample in samples if sample.nodes == current_nodes))
        capacity = self.capacity
        load = estimate_load(window.samples, current_nodes, arrivals=capacity.arrivals)
        if load is not None and load.open_loop and not capacity.arrivals:
            capacity = replace(capacity, arrivals=True)
        if load is not None:
            known = {entry.nodes: entry for entry in capacity.sizes}.get(current_nodes)
            fresh = load.measurement(now)
            if known is None or fresh.samples >= min(known.samples, MEASUREMENT_MIN_SAMPLES):
                capacity = capacity.with_measurement(fresh)
        return replace(self, window=window, current_nodes=current_nodes, capacity=capacity)

    def decide(
        self,
        policy: ScalePolicy,
        now: float,
        *,
        deadline_at: float | None = None,
        remaining_steps: float | None = None,
        remaining_tokens: float | None = None,
        context: dict[str, Any] | None = None,
        grid: GridShare | None = None,
    ) -> DecisionRecord:
        """Decide on the observed window (``grid``: what a shared grid leaves the job); the
        record's inputs reproduce the decision."""
        if self.current_nodes is None:
            raise ElasticGridError("the scale state has no current size; observe samples first")
        inputs = DecisionInputs(
            scheduler=policy,
            window=self.window,
            now=now,
            current_nodes=self.current_nodes,
            cooldown=self.cooldown,
            deadline_at=deadline_at,
            remaining_steps=remaining_steps,
            remaining_tokens=remaining_tokens,
            capacity=self.capacity,
            recent=self.recent,
            grid=grid,
        )
        return DecisionRecord(inputs.decide(), inputs, dict(context or {}))

    def remember(
        self, record: DecisionRecord, now: float, limit: int = DEFAULT_HISTORY_LIMIT
    ) -> ScaleState:
        """The state after ``record``: cooldown, recommendation, history, one revision on."""
        decision = record.decision
        window_s = float(record.inputs.scheduler.thresholds()["scale_down_window_s"])
        recent = [entry for entry in self.recent if now - entry.at <= window_s]
        if decision.recommended_nodes is not None:
            recent.append(Recommendation(now, decision.recommended_nodes))
        kept = tuple(recent[-RECENT_LIMIT:])
        state = self.remember_event(record.model_dump(), now, limit)
        return replace(state, recent=kept, cooldown=decision.cooldown)

    def advance(
        self,
        policy: ScalePolicy,
        samples: Iterable[StepSample],
        current_nodes: int,
        now: float,
        *,
        window_size: int = DEFAULT_WINDOW_SIZE,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
        **decide_options: Any,
    ) -> tuple[ScaleState, DecisionRecord]:
        """One check: :meth:`observe`, :meth:`decide` (``decide_options``), :meth:`remember`."""
        observed = self.observe(samples, current_nodes, now, window_size)
        record = observed.decide(policy, now, **decide_options)
        return observed.remember(record, now, history_limit), record

    def remember_event(
        self, entry: dict[str, Any], now: float, limit: int = DEFAULT_HISTORY_LIMIT
    ) -> ScaleState:
        """The state after a history entry, one revision on: alone for an entry that is no
        policy decision (``job_ended``, ``recover``, ``give_up``)."""
        history = _with_entry(self.history, entry, limit)
        return replace(self, history=history, revision=self.revision + 1, updated_at=now)

    @classmethod
    def model_validate(
        cls, data: Any, job_name: str | None = None, *, where: str | None = None
    ) -> ScaleState:
        """Rebuild a state from a Variable's JSON; with ``job_name``, another job's is refused."""
        state = super().model_validate(data, where=where)
        if job_name is not None and state.job_name != job_name:
            raise ElasticGridError(
                f"scale state job_name must be {job_name!r} (the job checked), "
                f"got {state.job_name!r}"
            )
        return state


def remember_recovery(
    state: ScaleState, decision: RecoveryDecision, record: dict[str, Any], limit: int
) -> ScaleState:
    """The state after a ``recover``/``give_up``: its quarantine, the recovery, the history entry."""
    if not decision.action.is_recorded:
        raise ElasticGridError(f"decision action {decision.action.value!r} is not recorded")
    recoveries = state.recovery.recoveries
    if decision.action is RecoveryAction.RECOVER:
        recoveries += (PastRecovery(at=decision.decided_at, launch_id=decision.launch_id),)
    kept = recoveries[-PAST_RECOVERIES_KEPT:]
    memory = RecoveryMemory(quarantine=decision.quarantine, recoveries=kept)
    return replace(state.remember_event(record, decision.decided_at, limit), recovery=memory)


def readable_fields(decision: dict[str, Any]) -> dict[str, Any]:
    """The summary line, ISO times and rounded numbers of a decision's plain JSON."""
    cooldown = decision.get("cooldown") or {}
    return {
        "summary": decision_summary(decision),
        "decided_at": iso_time(decision.get("decided_at")),
        "deadline_at": iso_time(decision.get("deadline_at")),
        "last_change_at": iso_time(cooldown.get("last_change_at")),
        "time_left_s": rounded(decision.get("time_left_s"), 1),
        "signals": rounded(decision.get("signals")),
        "projection": rounded(decision.get("projection")),
    }


def hold_run(entry: dict[str, Any]) -> dict[str, Any]:
    """How often a history entry's hold repeated: ``count``, ``first_at``, ``last_at``."""
    run = entry.get("hold_run")
    if isinstance(run, dict) and isinstance(run.get("count"), int):
        return run
    at = entry.get("decided_at")
    return {"count": 1, "first_at": at, "last_at": at}


def _hold_key(entry: dict[str, Any]) -> tuple[Any, ...] | None:
    """What makes two holds "the same hold"; None for a scale change."""
    if entry.get("action") != ScaleAction.HOLD:
        return None
    held = tuple(sorted(str(hold.get("rule")) for hold in entry.get("held_by") or ()))
    return (entry.get("rule"), held)


def _with_entry(
    history: tuple[dict[str, Any], ...], entry: dict[str, Any], limit: int
) -> tuple[dict[str, Any], ...]:
    """``history`` with ``entry``. A hold that repeats the previous entry (same rule, same
    rules holding it back) replaces it, keeping the newest record and a ``hold_run``
    ``{"count", "first_at", "last_at"}``; past ``limit`` entries the oldest hold goes first,
    changes and ends of the job only when nothing but them is left."""
    entries = list(history)
    key = _hold_key(entry)
    if key is not None and entries and _hold_key(entries[-1]) == key:
        run = hold_run(entries.pop())
        last_at = entry.get("decided_at")
        entry = {
            **entry,
            "hold_run": {
                "count": run["count"] + 1,
                "first_at": run.get("first_at"),
                "first_at_iso": iso_time(run.get("first_at")),
                "last_at": last_at,
                "last_at_iso": iso_time(last_at),
            },
        }
    entries.append(entry)
    while len(entries) > max(limit, 1):
        holds = [
            position
            for position, kept in enumerate(entries[:-1])
            if kept.get("action") == ScaleAction.HOLD and kept.get("rule") != EventRule.JOB_ENDED
        ]
        del entries[holds[0] if holds else 0]
    return tuple(entries)
