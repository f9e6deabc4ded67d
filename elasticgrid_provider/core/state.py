"""The scale state of one job, as it is kept between checks.

Each scale check may run in a new process on another worker, so everything a
decision depends on is in this one JSON document, stored as one Airflow
Variable per job (:func:`state_variable_key`):

* ``window``: the rolling window of step samples at the job's current size;
* ``cursors``: per step log, a :class:`~elasticgrid_provider.core.step_log.LogCursor`
  (the byte offset consumed, the file's identity, the highest step taken;
  a bare byte offset in older states); for handed-in samples, the next step;
* ``cooldown``: when the job was last resized, and in which direction;
* ``capacity``: per-node throughput measured at each size the job ran at,
  kept across resizes, from which the scheduler reads scaling efficiency;
* ``recent``: the sizes recommended by the checks of the last
  ``scale_down_window_s`` (the scale-down stabilisation window);
* ``current_nodes``: the job's size when the state was written;
* ``history``: the newest decisions (bounded), each a :class:`DecisionRecord`
  holding the decision *and* its inputs, so it can be replayed exactly (see
  "History" below);
* ``skipped_lines``: how many malformed step-log lines were skipped so far;
* ``recovery``: the providers quarantined after lost capacity and the recent
  recoveries (:class:`~elasticgrid_provider.core.recovery.RecoveryMemory`);
  absent in states written before it (no recoveries yet);
* ``revision``: incremented on every write, so a reader can tell states apart;
* ``schema_version``: the layout of this document (2). A version 1 document
  (before ``capacity`` and ``recent``) is migrated on load: it gains an
  empty capacity memory and no recent recommendations; its history is kept
  as recorded (those decisions replay under today's policy). Other versions
  are refused with one sentence saying what to do.

Reading refuses a document that is not a whole, valid state of the expected
job with one sentence (a wrong-typed ``history``, say, or a ``job_name``
naming another job); the caller must then leave the stored document alone,
never replace it with a fresh state, or the cooldown and history are lost.

History (:meth:`ScaleState.with_record`, :meth:`ScaleState.end_job`):

* every scale change and every end of the job gets its own entry;
* a hold that repeats the previous entry (same rule, same rules holding it
  back) replaces it, keeping the newest record (so it still replays) and a
  ``hold_run`` ``{"count", "first_at", "last_at"}`` (with ISO times): "held 12
  times by cooldown, 14:00-14:55" instead of twelve entries;
* past ``limit`` entries the oldest *hold* goes first; changes and ends of the
  job go only when nothing but them is left.

A record's ``context`` carries ``readable``: the one-line summary, ISO times
and rounded signals, next to the exact epoch values and floats. ``hold_run``
and ``readable`` are optional, so states written before them still load.

The transition of one check, the same in the sensor, ``elasticgrid simulate
--timeline`` and the policy benchmark: :meth:`ScaleState.observe` (take the
new samples measured at the current size; a resize starts a fresh window;
remember what they measured), :meth:`ScaleState.decide` (a
:class:`DecisionRecord` whose inputs reproduce it), :meth:`ScaleState.remember`
(cooldown, recent recommendations, history, revision). :meth:`ScaleState.advance`
runs all three.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.formatting import decision_summary, iso_time, rounded
from elasticgrid_provider.core.recovery import NO_RECOVERIES, RecoveryMemory
from elasticgrid_provider.core.samples import DEFAULT_WINDOW_SIZE, MetricsWindow, StepSample
from elasticgrid_provider.core.scheduler import (
    NO_MEASUREMENTS,
    CapacityMemory,
    CooldownClock,
    ElasticScheduler,
    Recommendation,
    ScaleDecision,
    estimate_load,
)
from elasticgrid_provider.core.step_log import LogCursor, cut_report
from elasticgrid_provider.core.validation import (
    check_integer,
    check_mapping,
    check_number,
    check_text,
)

SCHEMA_VERSION = 2
MIGRATABLE_SCHEMA_VERSIONS = (1,)
"""Older layouts :meth:`ScaleState.from_dict` still reads (and upgrades)."""
DEFAULT_HISTORY_LIMIT = 20
JOB_ENDED_RULE = "job_ended"
"""The ``rule`` of the history entry that records the end of the job."""
# keys of a history entry that annotate the decision and are not decision fields
RECORD_ANNOTATIONS = ("context", "inputs", "hold_run")
RECENT_LIMIT = 200
"""At most this many recent recommendations are kept, however short the checks' interval."""
MEASUREMENT_MIN_SAMPLES = 3
"""A window with fewer samples does not replace a fuller measurement at the same size."""


@contextmanager
def _reading(what: str) -> Iterator[None]:
    """Turn a missing or malformed field of a stored document into one clear sentence."""
    try:
        yield
    except KeyError as exc:
        raise ElasticGridError(f"{what} is missing the field {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ElasticGridError):
            raise
        raise ElasticGridError(f"{what} is malformed: {exc}") from None


def state_variable_key(job_name: str) -> str:
    """The Airflow Variable that holds ``job_name``'s scale state."""
    return f"elasticgrid_scale_state__{job_name}"


@dataclass(frozen=True)
class DecisionInputs:
    """Everything a decision was computed from; :meth:`decide` reproduces it exactly."""

    scheduler: ElasticScheduler
    window: MetricsWindow
    now: float
    current_nodes: int
    cooldown: CooldownClock = field(default_factory=CooldownClock)
    deadline_at: float | None = None
    remaining_steps: float | None = None
    remaining_tokens: float | None = None
    capacity: CapacityMemory = NO_MEASUREMENTS
    recent: tuple[Recommendation, ...] = ()

    def decide(self) -> ScaleDecision:
        """Run the scheduler on these inputs."""
        return self.scheduler.decide(
            self.window,
            now=self.now,
            current_nodes=self.current_nodes,
            cooldown=self.cooldown,
            deadline_at=self.deadline_at,
            remaining_steps=self.remaining_steps,
            remaining_tokens=self.remaining_tokens,
            capacity=self.capacity,
            recent=self.recent,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON; the inverse of :meth:`from_dict`."""
        return {
            "scheduler": self.scheduler.to_dict(),
            "window": self.window.to_dict(),
            "now": self.now,
            "current_nodes": self.current_nodes,
            "cooldown": self.cooldown.to_dict(),
            "deadline_at": self.deadline_at,
            "remaining_steps": self.remaining_steps,
            "remaining_tokens": self.remaining_tokens,
            "capacity": self.capacity.to_dict(),
            "recent": [entry.to_dict() for entry in self.recent],
        }

    @classmethod
    def from_dict(cls, data: Any) -> DecisionInputs:
        """Rebuild recorded inputs (for replay)."""
        check_mapping("decision inputs", data)
        with _reading("decision inputs"):
            return cls._from_checked_dict(data)

    @classmethod
    def _from_checked_dict(cls, data: dict[str, Any]) -> DecisionInputs:
        return cls(
            scheduler=ElasticScheduler.from_dict(data["scheduler"]),
            window=MetricsWindow.from_dict(data["window"]),
            now=data["now"],
            current_nodes=data["current_nodes"],
            cooldown=CooldownClock.from_dict(data.get("cooldown") or {}),
            deadline_at=data.get("deadline_at"),
            remaining_steps=data.get("remaining_steps"),
            remaining_tokens=data.get("remaining_tokens"),
            capacity=CapacityMemory.from_dict(data.get("capacity")),
            recent=_recommendations(data.get("recent")),
        )


POLICY_V2_INPUT_FIELDS = ("capacity", "recent")
"""Decision inputs the restart-aware policy records; a record without them is older."""


def recorded_by_older_policy(entry: Any) -> bool:
    """Whether a history entry's inputs predate :data:`POLICY_V2_INPUT_FIELDS` (schema 1).

    Such a record replays under today's rules, which may decide otherwise.
    """
    inputs = entry.get("inputs") if isinstance(entry, dict) else None
    return isinstance(inputs, dict) and any(name not in inputs for name in POLICY_V2_INPUT_FIELDS)


def _recommendations(data: Any) -> tuple[Recommendation, ...]:
    if data is None:
        return ()
    if not isinstance(data, list):
        raise ElasticGridError(f"recent recommendations must be a list, got {data!r}")
    return tuple(Recommendation.from_dict(entry) for entry in data)


@dataclass(frozen=True)
class DecisionRecord:
    """A decision, its inputs, and what surrounded it (job, deadline source, placements)."""

    decision: ScaleDecision
    inputs: DecisionInputs
    context: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON: the sensor's XCom and one history entry (``context.readable`` added)."""
        decision = self.decision.to_dict()
        context = {**self.context, "readable": readable_fields(decision)}
        return {**decision, "context": context, "inputs": self.inputs.to_dict()}

    @classmethod
    def from_dict(cls, data: Any) -> DecisionRecord:
        """Inverse of :meth:`to_dict`."""
        check_mapping("decision record", data)
        with _reading("decision record"):
            return cls._from_checked_dict(data)

    @classmethod
    def _from_checked_dict(cls, data: dict[str, Any]) -> DecisionRecord:
        decision_fields = {k: v for k, v in data.items() if k not in RECORD_ANNOTATIONS}
        return cls(
            decision=ScaleDecision.from_dict(decision_fields),
            inputs=DecisionInputs.from_dict(data.get("inputs")),
            context=dict(data.get("context") or {}),
        )

    def replay(self) -> ScaleDecision:
        """Recompute the decision from its recorded inputs."""
        return self.inputs.decide()


@dataclass(frozen=True)
class ScaleState:
    """One job's window, cursors, cooldown clock and decision history (see module docstring)."""

    job_name: str
    window: MetricsWindow = field(default_factory=MetricsWindow)
    cursors: tuple[tuple[str, int | LogCursor], ...] = ()
    cooldown: CooldownClock = field(default_factory=CooldownClock)
    current_nodes: int | None = None
    history: tuple[dict[str, Any], ...] = ()
    skipped_lines: int = 0
    revision: int = 0
    updated_at: float | None = None
    capacity: CapacityMemory = NO_MEASUREMENTS
    recent: tuple[Recommendation, ...] = ()
    recovery: RecoveryMemory = NO_RECOVERIES

    def cursor(self, source: str) -> int:
        """The position already consumed in ``source`` (0 when never read)."""
        value = dict(self.cursors).get(source, 0)
        return value.offset if isinstance(value, LogCursor) else value

    def log_cursor(self, source: str) -> LogCursor | None:
        """Where the step log ``source`` was last read, or None when it never was."""
        value = dict(self.cursors).get(source)
        return LogCursor(offset=value) if isinstance(value, int) else value

    def with_cursor(self, source: str, offset: int | LogCursor) -> ScaleState:
        """A copy with ``source``'s cursor moved to ``offset``."""
        cursors = dict(self.cursors)
        cursors[source] = offset
        return replace(self, cursors=tuple(sorted(cursors.items())))

    def after_check(self, window: MetricsWindow, current_nodes: int, now: float) -> ScaleState:
        """A copy for the state a check leaves: its window and the job's size, one revision on."""
        return replace(
            self,
            window=window,
            current_nodes=current_nodes,
            revision=self.revision + 1,
            updated_at=now,
        )

    # -- the transition of one check: observe -> decide -> remember ------------------

    def observe(
        self,
        samples: Iterable[StepSample],
        current_nodes: int,
        now: float,
        window_size: int = DEFAULT_WINDOW_SIZE,
    ) -> ScaleState:
        """Take new samples: only those measured at ``current_nodes`` enter the window.

        A size other than the one last recorded means the job was resized:
        the window starts afresh. What the window measured at this size is
        kept in the capacity memory, which outlives the window.
        """
        window = MetricsWindow(window_size, self.window.samples)
        if self.current_nodes is not None and self.current_nodes != current_nodes:
            window = MetricsWindow(window_size)
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
        scheduler: ElasticScheduler,
        now: float,
        *,
        deadline_at: float | None = None,
        remaining_steps: float | None = None,
        remaining_tokens: float | None = None,
        context: dict[str, Any] | None = None,
    ) -> DecisionRecord:
        """Decide on the observed window; the record's inputs reproduce the decision."""
        if self.current_nodes is None:
            raise ElasticGridError("the scale state has no current size; observe samples first")
        inputs = DecisionInputs(
            scheduler=scheduler,
            window=self.window,
            now=now,
            current_nodes=self.current_nodes,
            cooldown=self.cooldown,
            deadline_at=deadline_at,
            remaining_steps=remaining_steps,
            remaining_tokens=remaining_tokens,
            capacity=self.capacity,
            recent=self.recent,
        )
        return DecisionRecord(inputs.decide(), inputs, dict(context or {}))

    def remember(
        self, record: DecisionRecord, now: float, limit: int = DEFAULT_HISTORY_LIMIT
    ) -> ScaleState:
        """The state after ``record``: its cooldown clock, the recommendation, the history.

        A hold that repeats the previous entry is folded into it with a count
        (:meth:`with_record`), so the history keeps the decisions that matter.
        """
        decision = record.decision
        window_s = float(record.inputs.scheduler.thresholds()["scale_down_window_s"])
        recent = [entry for entry in self.recent if now - entry.at <= window_s]
        if decision.recommended_nodes is not None:
            recent.append(Recommendation(now, decision.recommended_nodes))
        state = replace(
            self,
            recent=tuple(recent[-RECENT_LIMIT:]),
            revision=self.revision + 1,
            updated_at=now,
        )
        return state.with_record(record, limit)

    def advance(
        self,
        scheduler: ElasticScheduler,
        samples: Iterable[StepSample],
        current_nodes: int,
        now: float,
        *,
        window_size: int = DEFAULT_WINDOW_SIZE,
        deadline_at: float | None = None,
        remaining_steps: float | None = None,
        remaining_tokens: float | None = None,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
        context: dict[str, Any] | None = None,
    ) -> tuple[ScaleState, DecisionRecord]:
        """One check: :meth:`observe`, :meth:`decide`, :meth:`remember`."""
        observed = self.observe(samples, current_nodes, now, window_size)
        record = observed.decide(
            scheduler,
            now,
            deadline_at=deadline_at,
            remaining_steps=remaining_steps,
            remaining_tokens=remaining_tokens,
            context=context,
        )
        return observed.remember(record, now, history_limit), record

    def with_record(self, record: DecisionRecord, limit: int = DEFAULT_HISTORY_LIMIT) -> ScaleState:
        """A copy with ``record`` in the history (module docstring) and its cooldown clock."""
        return replace(
            self,
            history=_with_entry(self.history, record.to_dict(), limit),
            cooldown=record.decision.cooldown,
        )

    def end_job(
        self, entry: dict[str, Any], now: float, limit: int = DEFAULT_HISTORY_LIMIT
    ) -> ScaleState:
        """The state a check of an ended job leaves: the ``job_ended`` entry, one revision on."""
        return replace(
            self,
            history=_with_entry(self.history, entry, limit),
            revision=self.revision + 1,
            updated_at=now,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON: the Variable's value."""
        return {
            "schema_version": SCHEMA_VERSION,
            "job_name": self.job_name,
            "revision": self.revision,
            "updated_at": self.updated_at,
            "current_nodes": self.current_nodes,
            "window": self.window.to_dict(),
            "cursors": {
                source: value.to_dict() if isinstance(value, LogCursor) else value
                for source, value in self.cursors
            },
            "cooldown": self.cooldown.to_dict(),
            "skipped_lines": self.skipped_lines,
            "history": list(self.history),
            "capacity": self.capacity.to_dict(),
            "recent": [entry.to_dict() for entry in self.recent],
            "recovery": self.recovery.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Any, job_name: str | None = None) -> ScaleState:
        """Rebuild a state from a Variable's JSON; migrates version 1, refuses unknown versions.

        With ``job_name``, a state that belongs to another job is refused too.
        """
        check_mapping("scale state", data)
        version = data.get("schema_version")
        if version in MIGRATABLE_SCHEMA_VERSIONS:
            data = {**data, "schema_version": SCHEMA_VERSION}
        elif version != SCHEMA_VERSION:
            raise ElasticGridError(
                f"scale state schema_version must be {SCHEMA_VERSION} (or 1, which is migrated), "
                f"got {version!r}; delete the job's Variable "
                f"{state_variable_key(str(data.get('job_name', '<job>')))} to start afresh"
            )
        with _reading("scale state"):
            state = cls._from_checked_dict(data)
        if job_name is not None and state.job_name != job_name:
            raise ElasticGridError(
                f"scale state job_name must be {job_name!r} (the job checked), "
                f"got {state.job_name!r}"
            )
        return state

    @classmethod
    def _from_checked_dict(cls, data: dict[str, Any]) -> ScaleState:
        current_nodes = data.get("current_nodes")
        updated_at = data.get("updated_at")
        return cls(
            job_name=check_text("scale state job_name", data["job_name"]),
            window=MetricsWindow.from_dict(data["window"]),
            cursors=tuple(
                sorted(
                    (str(source), _stored_cursor(f"scale state cursor {source!r}", value))
                    for source, value in check_mapping(
                        "scale state cursors", data.get("cursors", {})
                    ).items()
                )
            ),
            cooldown=CooldownClock.from_dict(data.get("cooldown") or {}),
            current_nodes=None
            if current_nodes is None
            else check_integer("scale state current_nodes", current_nodes, minimum=1),
            history=_stored_history(data.get("history", [])),
            skipped_lines=check_integer("scale state skipped_lines", data.get("skipped_lines", 0)),
            revision=check_integer("scale state revision", data.get("revision", 0)),
            updated_at=None
            if updated_at is None
            else check_number("scale state updated_at", updated_at),
            capacity=CapacityMemory.from_dict(data.get("capacity")),
            recent=_recommendations(data.get("recent")),
            recovery=RecoveryMemory.from_dict(data.get("recovery")),
        )


def _stored_cursor(where: str, value: Any) -> int | LogCursor:
    """A stored cursor: a bare number (a next step, or an older state's byte offset) or a LogCursor."""
    if isinstance(value, dict):
        return LogCursor.from_value(where, value)
    return check_integer(where, value)


def _stored_history(value: Any) -> tuple[dict[str, Any], ...]:
    """The stored decision history: a list of decision objects."""
    if not isinstance(value, list):
        raise ElasticGridError(
            f"scale state history must be a list of decisions, got {cut_report(repr(value), 80)}"
        )
    for position, entry in enumerate(value):
        check_mapping(f"scale state history entry {position}", entry)
    return tuple(value)


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
    if entry.get("action") != "hold":
        return None
    held = tuple(sorted(str(hold.get("rule")) for hold in entry.get("held_by") or ()))
    return (entry.get("rule"), held)


def _with_entry(
    history: tuple[dict[str, Any], ...], entry: dict[str, Any], limit: int
) -> tuple[dict[str, Any], ...]:
    """``history`` with ``entry``: repeated holds folded, then bounded (module docstring)."""
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
            if kept.get("action") == "hold" and kept.get("rule") != JOB_ENDED_RULE
        ]
        del entries[holds[0] if holds else 0]
    return tuple(entries)
