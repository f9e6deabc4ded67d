"""The scale decision: how big should a training job be right now?

:meth:`ElasticScheduler.decide` reads the signals of a :class:`MetricsWindow`
and answers ``scale_up``, ``scale_down`` or ``hold`` with a target size, a
human reason, the rule that fired and every rule that held it back. It is a
pure function of its arguments: the caller supplies ``now`` (epoch seconds),
the deadline and the :class:`CooldownClock`, and gets the clock to store back
in the returned decision. Nothing lives in process memory, so a scheduled
check in a fresh process on another worker decides exactly as the last one
would have, and a recorded decision replays from its inputs (SPEC 2, 4.6.5).

Rules, in order; the first that fires decides:

1. ``min_samples``: fewer samples than ``min_samples`` -> hold. An empty
   window without ``current_nodes`` has size 0 ("unknown") and always lands
   here, because ``min_samples`` is at least 1.
2. ``bounds``: below ``min_nodes`` -> scale up to the floor; above
   ``max_nodes`` -> scale *down* to the ceiling (0.1.0 called that a scale
   up, defect 4.6.4). A bounds correction is a configuration fix, not a
   reaction to load, so neither the cooldown nor the deadline holds it back;
   it does start the cooldown.
3. ``queue_bound`` / ``deadline_pressure`` -> scale up.
   Queue-bound when ``queue_fraction >= target_queue_fraction``; its target
   is ``int(current * scale_up_factor)``, at least ``current + 1``, at most
   ``max_nodes``. Deadline pressure needs ``deadline_at`` and the remaining
   work (``remaining_steps`` with a mean step > 0, else ``remaining_tokens``
   with a throughput > 0): the work takes ``remaining_steps * mean_step_s``
   (or ``remaining_tokens / throughput``) at the current size, and pressure
   means that is more than the time left. Work is assumed to scale linearly,
   ``time(n) = time(current) * current / n``, and new nodes only help after
   ``startup_s``, so the size needed is the smallest ``n`` with
   ``startup_s + time(n) <= time_left``, i.e.
   ``ceil(current * time(current) / (time_left - startup_s))``; when even
   ``max_nodes`` is too few the target is ``max_nodes`` and the reason says
   the deadline will still be missed. The target is the larger of the two;
   ``rule`` names the one that set it (``queue_bound`` on a tie).
   Held back by ``ceiling`` (already at ``max_nodes``), ``deadline`` (a
   deadline is known and no more than ``startup_s`` is left: new nodes would
   not be useful before it; 0.1.0 only checked for time <= 0, defect 4.6.3)
   and ``cooldown`` (less than ``cooldown_s`` since the last change).
4. ``idle``: mean step > 0, mean step <= ``idle_step_fraction *
   target_step_s`` and ``queue_fraction <= idle_queue_fraction`` -> scale
   down to ``int(current * scale_down_factor)``, at least ``min_nodes``, at
   most ``current - 1``. Held back by ``floor`` (already at ``min_nodes``),
   ``deadline`` (a deadline and the remaining work are known, and the
   smaller size would not finish in the time left) and ``cooldown`` (less
   than ``scale_down_cooldown_s``, which defaults to ``cooldown_s``, since
   the last change).
5. ``balanced``: hold.

A held-back candidate becomes ``hold`` at the current size; the decision
keeps the rule that fired and one :class:`HeldBy` per rule that held it.
A scale change sets the cooldown clock to ``now``; a hold returns the clock
it was given. A cooldown counts from the last change in either direction; a
change recorded in the future (clock skew) counts as "in cooldown" unless
that cooldown is 0. The projection assumes the window's mean step describes
the current size.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from enum import Enum
from typing import Any

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.samples import MetricsWindow, WindowSignals
from elasticgrid_provider.core.validation import (
    check_choice,
    check_integer,
    check_mapping,
    check_number,
    check_text,
    reject_unknown_keys,
)

RULES = ("min_samples", "bounds", "queue_bound", "deadline_pressure", "idle", "balanced")
"""The rules a decision can name as the one that fired, in evaluation order."""
HOLD_RULES = ("ceiling", "floor", "deadline", "cooldown")
"""The rules that can hold back a scale change."""


class ScaleAction(str, Enum):
    """What a decision asks for."""

    SCALE_UP = "scale_up"
    SCALE_DOWN = "scale_down"
    HOLD = "hold"


def _parse_action(field_name: str, value: Any, allowed: tuple[ScaleAction, ...]) -> ScaleAction:
    """Accept a :class:`ScaleAction` or its string value, or raise naming ``field_name``."""
    return ScaleAction(check_choice(field_name, value, tuple(action.value for action in allowed)))


def _optional_number(field_name: str, value: Any, *, minimum: float | None) -> float | None:
    """``None`` stays ``None``; anything else must be a finite number."""
    return None if value is None else check_number(field_name, value, minimum=minimum)


def _number_text(value: float) -> str:
    """A number for a reason sentence: ``1200``, ``857.1``."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _seconds(value: float) -> str:
    return f"{_number_text(value)}s"


def _require(kind: type, field_name: str, value: Any) -> None:
    if not isinstance(value, kind):
        raise ElasticGridError(f"{field_name} must be a {kind.__name__}, got {value!r}")


def _missing(where: str, data: dict[str, Any], required: tuple[str, ...]) -> None:
    for name in required:
        if name not in data:
            raise ElasticGridError(f"{where} is missing the field {name!r}")


@dataclass(frozen=True)
class CooldownClock:
    """When the job last changed size, and how: the whole cooldown state, stored by the caller."""

    last_change_at: float | None = None
    last_action: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "last_change_at",
            _optional_number("cooldown last_change_at", self.last_change_at, minimum=None),
        )
        if self.last_action is not None:
            action = _parse_action(
                "cooldown last_action",
                self.last_action,
                (ScaleAction.SCALE_UP, ScaleAction.SCALE_DOWN),
            )
            object.__setattr__(self, "last_action", action.value)

    def seconds_since_change(self, now: float) -> float | None:
        """Seconds from the last change to ``now``; ``None`` when there was none."""
        return None if self.last_change_at is None else now - self.last_change_at

    def after_change(self, action: ScaleAction, now: float) -> CooldownClock:
        """The clock after a scale change at ``now``."""
        return CooldownClock(last_change_at=now, last_action=action.value)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON; the inverse of :meth:`from_dict`."""
        return {"last_change_at": self.last_change_at, "last_action": self.last_action}

    @classmethod
    def from_dict(cls, data: Any) -> CooldownClock:
        """Rebuild a clock from :meth:`to_dict` output; missing fields mean "no change yet"."""
        check_mapping("cooldown", data)
        reject_unknown_keys("cooldown", data, {"last_change_at", "last_action"})
        return cls(data.get("last_change_at"), data.get("last_action"))


NO_COOLDOWN = CooldownClock()
"""The clock of a job that has never changed size."""


@dataclass(frozen=True)
class HeldBy:
    """A rule that stopped a scale change, and why in one sentence."""

    rule: str
    reason: str

    def __post_init__(self) -> None:
        check_choice("held_by rule", self.rule, HOLD_RULES)
        check_text("held_by reason", self.reason)

    def to_dict(self) -> dict[str, str]:
        """Plain JSON; the inverse of :meth:`from_dict`."""
        return {"rule": self.rule, "reason": self.reason}

    @classmethod
    def from_dict(cls, data: Any) -> HeldBy:
        """Rebuild from :meth:`to_dict` output."""
        check_mapping("held_by entry", data)
        reject_unknown_keys("held_by entry", data, {"rule", "reason"})
        _missing("held_by entry", data, ("rule", "reason"))
        return cls(data["rule"], data["reason"])


@dataclass(frozen=True)
class _RemainingWork:
    """The work left before the deadline, in seconds at the current size."""

    basis: str  # "steps" or "tokens"
    amount: float
    seconds: float
    nodes: int

    def seconds_at(self, nodes: int) -> float:
        """Seconds the work takes on ``nodes`` nodes, assuming linear scaling (kept finite)."""
        return min(self.seconds * (self.nodes / nodes), sys.float_info.max)

    @property
    def phrase(self) -> str:
        return f"the remaining {_number_text(self.amount)} {self.basis}"


@dataclass(frozen=True)
class _Situation:
    """The validated inputs of one decision."""

    signals: WindowSignals
    current: int
    now: float
    cooldown: CooldownClock
    deadline_at: float | None
    work: _RemainingWork | None

    @property
    def time_left_s(self) -> float | None:
        return None if self.deadline_at is None else self.deadline_at - self.now

    @property
    def under_pressure(self) -> bool:
        """The remaining work will not finish in the time left at the current size."""
        time_left = self.time_left_s
        return (
            self.work is not None
            and time_left is not None
            and self.work.seconds > 0
            and self.work.seconds > time_left
        )


@dataclass(frozen=True)
class _Verdict:
    """What a rule concluded: the change it wants (if any) and what held it back."""

    rule: str
    why: str
    action: ScaleAction = ScaleAction.HOLD
    target: int | None = None
    held_by: tuple[HeldBy, ...] = ()


SCHEDULER_PARAMETERS = (
    # the parameters of ElasticScheduler, in order (the sensor takes each as an argument)
    "min_nodes",
    "max_nodes",
    "scale_up_factor",
    "scale_down_factor",
    "cooldown_s",
    "scale_down_cooldown_s",
    "target_queue_fraction",
    "idle_queue_fraction",
    "idle_step_fraction",
    "target_step_s",
    "min_samples",
    "startup_s",
)


@dataclass(frozen=True)
class ElasticScheduler:
    """The scale policy: bounds, growth factors, cooldowns and thresholds (SPEC 4.2).

    ``cooldown_s`` holds back scale-ups; ``scale_down_cooldown_s`` (default:
    ``cooldown_s``) holds back scale-downs. ``startup_s`` is how long new
    nodes take to become useful (provisioning plus restart), which the
    deadline rule respects.
    """

    min_nodes: int = 1
    max_nodes: int = 1024
    scale_up_factor: float = 2.0
    scale_down_factor: float = 0.5
    cooldown_s: float = 300.0
    scale_down_cooldown_s: float | None = None
    target_queue_fraction: float = 0.2
    idle_queue_fraction: float = 0.05
    idle_step_fraction: float = 0.5
    target_step_s: float = 30.0
    min_samples: int = 3
    startup_s: float = 0.0

    def __post_init__(self) -> None:
        min_nodes = check_integer("min_nodes", self.min_nodes, minimum=1)
        checked: dict[str, Any] = {
            "min_nodes": min_nodes,
            "max_nodes": check_integer("max_nodes", self.max_nodes, minimum=min_nodes),
            "scale_up_factor": check_number(
                "scale_up_factor", self.scale_up_factor, minimum=1.0, exclusive_minimum=True
            ),
            "scale_down_factor": check_number(
                "scale_down_factor",
                self.scale_down_factor,
                minimum=0.0,
                exclusive_minimum=True,
                maximum=1.0,
                exclusive_maximum=True,
            ),
            "cooldown_s": check_number("cooldown_s", self.cooldown_s),
            "scale_down_cooldown_s": _optional_number(
                "scale_down_cooldown_s", self.scale_down_cooldown_s, minimum=0.0
            ),
            "target_queue_fraction": check_number(
                "target_queue_fraction", self.target_queue_fraction, maximum=1.0
            ),
            "idle_queue_fraction": check_number(
                "idle_queue_fraction", self.idle_queue_fraction, maximum=1.0
            ),
            "idle_step_fraction": check_number(
                "idle_step_fraction", self.idle_step_fraction, exclusive_minimum=True
            ),
            "target_step_s": check_number(
                "target_step_s", self.target_step_s, exclusive_minimum=True
            ),
            "min_samples": check_integer("min_samples", self.min_samples, minimum=1),
            "startup_s": check_number("startup_s", self.startup_s),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    @property
    def effective_scale_down_cooldown_s(self) -> float:
        """The scale-down cooldown in force: ``scale_down_cooldown_s``, else ``cooldown_s``."""
        if self.scale_down_cooldown_s is None:
            return self.cooldown_s
        return self.scale_down_cooldown_s

    def thresholds(self) -> dict[str, Any]:
        """Every parameter as used (the scale-down cooldown resolved), for the audit record."""
        return {**self.to_dict(), "scale_down_cooldown_s": self.effective_scale_down_cooldown_s}

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON of the parameters as given; the inverse of :meth:`from_dict`."""
        return {name: getattr(self, name) for name in SCHEDULER_PARAMETERS}

    @classmethod
    def from_dict(cls, data: Any) -> ElasticScheduler:
        """Build a scheduler from a JSON object; missing parameters take their defaults."""
        check_mapping("scheduler", data)
        reject_unknown_keys("scheduler", data, frozenset(SCHEDULER_PARAMETERS))
        return cls(**data)

    def decide(
        self,
        window: MetricsWindow,
        *,
        now: float,
        current_nodes: int | None = None,
        cooldown: CooldownClock = NO_COOLDOWN,
        deadline_at: float | None = None,
        remaining_steps: float | None = None,
        remaining_tokens: float | None = None,
    ) -> ScaleDecision:
        """Decide the job's size from ``window`` at ``now`` (epoch seconds); see the module notes.

        ``current_nodes`` defaults to the newest sample's node count.
        ``deadline_at`` is epoch seconds; ``remaining_steps`` or
        ``remaining_tokens`` let the deadline rule project the finish.
        """
        situation = self._situation(
            window, now, current_nodes, cooldown, deadline_at, remaining_steps, remaining_tokens
        )
        verdict = (
            self._min_samples_rule(situation)
            or self._bounds_rule(situation)
            or self._scale_up_rule(situation)
            or self._idle_rule(situation)
            or _Verdict("balanced", "the step is balanced; hold the current size")
        )
        return self._decision(situation, verdict)

    # -- inputs ---------------------------------------------------------------

    def _situation(
        self,
        window: Any,
        now: Any,
        current_nodes: Any,
        cooldown: Any,
        deadline_at: Any,
        remaining_steps: Any,
        remaining_tokens: Any,
    ) -> _Situation:
        _require(MetricsWindow, "window", window)
        _require(CooldownClock, "cooldown", cooldown)
        signals = window.signals()
        if current_nodes is None:
            current = signals.nodes
        else:
            current = check_integer("current_nodes", current_nodes, minimum=1)
        deadline = _optional_number("deadline_at", deadline_at, minimum=None)
        steps = _optional_number("remaining_steps", remaining_steps, minimum=0.0)
        tokens = _optional_number("remaining_tokens", remaining_tokens, minimum=0.0)
        work = _remaining_work(signals, current, steps, tokens) if deadline is not None else None
        return _Situation(
            signals=signals,
            current=current,
            now=check_number("now", now, minimum=None),
            cooldown=cooldown,
            deadline_at=deadline,
            work=work,
        )

    # -- rules ----------------------------------------------------------------

    def _min_samples_rule(self, situation: _Situation) -> _Verdict | None:
        count = situation.signals.samples
        if count >= self.min_samples:
            return None
        why = f"not enough samples to decide: {count} of {self.min_samples}"
        if situation.current == 0:
            why += "; the current size is unknown until a sample arrives"
        return _Verdict("min_samples", why)

    def _bounds_rule(self, situation: _Situation) -> _Verdict | None:
        current = situation.current
        if current < self.min_nodes:
            why = f"current size {current} is below the floor of {self.min_nodes}"
            action, target = ScaleAction.SCALE_UP, self.min_nodes
        elif current > self.max_nodes:
            why = f"current size {current} is above the ceiling of {self.max_nodes}"
            action, target = ScaleAction.SCALE_DOWN, self.max_nodes
        else:
            return None
        if self._cooldown_hold(situation, action) is not None:
            why += " (bounds corrections ignore the cooldown)"
        return _Verdict("bounds", why, action, target)

    def _scale_up_rule(self, situation: _Situation) -> _Verdict | None:
        signals = situation.signals
        queue_bound = signals.queue_fraction >= self.target_queue_fraction
        pressure = situation.under_pressure
        if not (queue_bound or pressure):
            return None
        current = situation.current
        reasons: list[str] = []
        queue_target = pressure_target = current
        if queue_bound:
            queue_target = self._grown(current)
            reasons.append(
                f"{signals.queue_fraction:.0%} of the step was spent waiting for a worker"
            )
        if pressure:
            needed, explanation = self._deadline_target(situation)
            pressure_target = current if needed is None else needed
            reasons.append(explanation)
        pressure_sets_target = pressure and (not queue_bound or pressure_target > queue_target)
        rule = "deadline_pressure" if pressure_sets_target else "queue_bound"
        held = (
            self._ceiling_hold(current),
            self._startup_hold(situation),
            self._cooldown_hold(situation, ScaleAction.SCALE_UP),
        )
        return _Verdict(
            rule,
            "; ".join(reasons),
            ScaleAction.SCALE_UP,
            max(queue_target, pressure_target),
            tuple(hold for hold in held if hold is not None),
        )

    def _idle_rule(self, situation: _Situation) -> _Verdict | None:
        signals = situation.signals
        idle_limit_s = self.idle_step_fraction * self.target_step_s
        idle = (
            0 < signals.mean_step_s <= idle_limit_s
            and signals.queue_fraction <= self.idle_queue_fraction
        )
        if not idle:
            return None
        current = situation.current
        why = (
            f"the mean step of {_seconds(signals.mean_step_s)} is at most "
            f"{self.idle_step_fraction:.0%} of the {_seconds(self.target_step_s)} target and "
            f"{signals.queue_fraction:.0%} of it was spent waiting for a worker"
        )
        target = self._shrunk(current)
        held = (
            self._floor_hold(current),
            self._shrink_deadline_hold(situation, target),
            self._cooldown_hold(situation, ScaleAction.SCALE_DOWN),
        )
        return _Verdict(
            "idle",
            why,
            ScaleAction.SCALE_DOWN,
            target,
            tuple(hold for hold in held if hold is not None),
        )

    # -- targets --------------------------------------------------------------

    def _grown(self, current: int) -> int:
        """``int(current * scale_up_factor)``, at least ``current + 1``, at most the ceiling."""
        return min(self.max_nodes, max(current + 1, int(current * self.scale_up_factor)))

    def _shrunk(self, current: int) -> int:
        """``int(current * scale_down_factor)``, at most ``current - 1``, at least the floor."""
        if current <= self.min_nodes:
            return current
        return max(self.min_nodes, min(current - 1, int(current * self.scale_down_factor)))

    def _deadline_target(self, situation: _Situation) -> tuple[int | None, str]:
        """The size that finishes the remaining work in time, and the sentence explaining it.

        ``None`` when no size can help because new nodes would start too late.
        """
        work = situation.work
        time_left = situation.time_left_s
        assert work is not None and time_left is not None  # guarded by under_pressure
        current = situation.current
        left_text = f"{_seconds(time_left)} are left" if time_left > 0 else "no time is left"
        explanation = (
            f"at {current} nodes {work.phrase} take {_seconds(work.seconds)} but {left_text}"
        )
        usable_s = time_left - self.startup_s
        if usable_s <= 0:
            return None, explanation
        needed = current * work.seconds / usable_s
        if not math.isfinite(needed) or needed > self.max_nodes:
            finish = self._finish_text(work, self.max_nodes)
            return self.max_nodes, (
                f"{explanation}; even {self.max_nodes} nodes need {finish}, "
                "so the deadline will still be missed"
            )
        # Round away float noise (5.9999999999 or 6.0000000001 for an exact 6).
        nodes = max(current + 1, math.ceil(round(needed, 9)))
        nodes = min(nodes, self.max_nodes)
        finish = self._finish_text(work, nodes)
        return nodes, f"{explanation}; {nodes} nodes finish in {finish}"

    def _finish_text(self, work: _RemainingWork, nodes: int) -> str:
        text = _seconds(work.seconds_at(nodes))
        return f"{text} + {_seconds(self.startup_s)} startup" if self.startup_s > 0 else text

    # -- what holds a change back --------------------------------------------

    def _ceiling_hold(self, current: int) -> HeldBy | None:
        if current < self.max_nodes:
            return None
        return HeldBy("ceiling", f"already at the node ceiling of {self.max_nodes}")

    def _floor_hold(self, current: int) -> HeldBy | None:
        if current > self.min_nodes:
            return None
        return HeldBy("floor", f"already at the node floor of {self.min_nodes}")

    def _startup_hold(self, situation: _Situation) -> HeldBy | None:
        """New nodes are useless when the deadline comes before they can start."""
        time_left = situation.time_left_s
        if time_left is None or time_left > self.startup_s:
            return None
        if time_left <= 0:
            return HeldBy("deadline", "no time is left before the deadline")
        comparison = "less than" if time_left < self.startup_s else "no more than"
        return HeldBy(
            "deadline",
            f"only {_seconds(time_left)} left before the deadline, {comparison} the "
            f"{_seconds(self.startup_s)} new nodes need to start",
        )

    def _shrink_deadline_hold(self, situation: _Situation, target: int) -> HeldBy | None:
        """A smaller job must still finish the remaining work in time."""
        work = situation.work
        time_left = situation.time_left_s
        if work is None or time_left is None or work.seconds <= 0 or target >= situation.current:
            return None
        finish_s = work.seconds_at(target)
        if finish_s <= time_left:
            return None
        left_text = f"only {_seconds(time_left)} are left" if time_left > 0 else "no time is left"
        return HeldBy(
            "deadline",
            f"at {target} nodes {work.phrase} would take {_seconds(finish_s)} but {left_text}",
        )

    def _cooldown_hold(self, situation: _Situation, action: ScaleAction) -> HeldBy | None:
        if action is ScaleAction.SCALE_UP:
            kind, cooldown_s = "scale-up", self.cooldown_s
        else:
            kind, cooldown_s = "scale-down", self.effective_scale_down_cooldown_s
        elapsed = situation.cooldown.seconds_since_change(situation.now)
        if elapsed is None or cooldown_s <= 0 or elapsed >= cooldown_s:
            return None
        if elapsed >= 0:
            since = f"last change {_seconds(elapsed)} ago"
        else:
            since = f"last change is recorded {_seconds(-elapsed)} in the future"
        return HeldBy(
            "cooldown", f"in cooldown: {since}, {kind} cooldown is {_seconds(cooldown_s)}"
        )

    # -- the decision ---------------------------------------------------------

    def _decision(self, situation: _Situation, verdict: _Verdict) -> ScaleDecision:
        current = situation.current
        wanted = current if verdict.target is None else verdict.target
        action, target, clock = ScaleAction.HOLD, current, situation.cooldown
        if verdict.action is ScaleAction.HOLD:
            reason = verdict.why
        elif verdict.held_by:
            reason = f"{verdict.why}; holding at {current}"
            if wanted != current:
                reason += f" instead of {_verb(verdict.action)} to {wanted}"
            reason += ": " + "; ".join(hold.reason for hold in verdict.held_by)
        else:
            action, target = verdict.action, wanted
            clock = situation.cooldown.after_change(action, situation.now)
            reason = f"{verdict.why}; {_verb(action)} {current} -> {target}"
        return ScaleDecision(
            action=action,
            current_nodes=current,
            target_nodes=target,
            reason=reason,
            rule=verdict.rule,
            held_by=verdict.held_by,
            signals=situation.signals,
            thresholds=self.thresholds(),
            decided_at=situation.now,
            deadline_at=situation.deadline_at,
            time_left_s=situation.time_left_s,
            projection=self._projection(situation, wanted),
            cooldown=clock,
        )

    def _projection(self, situation: _Situation, wanted: int) -> dict[str, Any] | None:
        """The deadline numbers behind the decision, or ``None`` without a deadline and work.

        ``target_finish_s`` is the finish at the wanted size, plus ``startup_s``
        when that size is larger than the current one.
        """
        work, time_left = situation.work, situation.time_left_s
        if work is None or time_left is None:
            return None
        target_finish_s = work.seconds_at(wanted)
        if wanted > situation.current:
            target_finish_s += self.startup_s
        return {
            "basis": work.basis,
            "remaining": work.amount,
            "current_nodes": situation.current,
            "current_finish_s": work.seconds,
            "time_left_s": time_left,
            "startup_s": self.startup_s,
            "target_nodes": wanted,
            "target_finish_s": target_finish_s,
            "meets_deadline": target_finish_s <= time_left,
        }


def _verb(action: ScaleAction) -> str:
    return "scaling up" if action is ScaleAction.SCALE_UP else "scaling down"


def _remaining_work(
    signals: WindowSignals, current: int, steps: float | None, tokens: float | None
) -> _RemainingWork | None:
    """Project the remaining work at the current size: steps first, else tokens."""
    if steps is not None and signals.mean_step_s > 0:
        work = _RemainingWork("steps", steps, steps * signals.mean_step_s, current)
    elif tokens is not None and signals.throughput_tokens_per_s > 0:
        work = _RemainingWork("tokens", tokens, tokens / signals.throughput_tokens_per_s, current)
    else:
        return None
    if not math.isfinite(work.seconds):
        raise ElasticGridError(
            f"remaining_{work.basis} {work.amount!r} is too large to project a finish time"
        )
    return work


_DECISION_REQUIRED = (
    "action",
    "current_nodes",
    "target_nodes",
    "reason",
    "rule",
    "signals",
    "thresholds",
    "decided_at",
    "cooldown",
)
_DECISION_FIELDS = frozenset(
    {*_DECISION_REQUIRED, "held_by", "deadline_at", "time_left_s", "projection"}
)


@dataclass(frozen=True)
class ScaleDecision:
    """One scale decision with everything an auditor needs to check or replay it.

    ``cooldown`` is the clock *after* this decision: store it and pass it to
    the next :meth:`ElasticScheduler.decide`. ``target_nodes`` equals
    ``current_nodes`` for a hold, is larger for ``scale_up`` and smaller for
    ``scale_down``; construction refuses anything else.
    """

    action: ScaleAction
    current_nodes: int
    target_nodes: int
    reason: str
    rule: str
    signals: WindowSignals
    thresholds: dict[str, Any]
    decided_at: float
    cooldown: CooldownClock
    held_by: tuple[HeldBy, ...] = ()
    deadline_at: float | None = None
    time_left_s: float | None = None
    projection: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        set_field = object.__setattr__
        set_field(self, "action", _parse_action("decision action", self.action, tuple(ScaleAction)))
        set_field(
            self, "current_nodes", check_integer("decision current_nodes", self.current_nodes)
        )
        set_field(self, "target_nodes", check_integer("decision target_nodes", self.target_nodes))
        check_text("decision reason", self.reason)
        check_choice("decision rule", self.rule, RULES)
        _require(WindowSignals, "decision signals", self.signals)
        _require(CooldownClock, "decision cooldown", self.cooldown)
        check_mapping("decision thresholds", self.thresholds)
        set_field(self, "thresholds", ElasticScheduler.from_dict(self.thresholds).thresholds())
        set_field(
            self, "decided_at", check_number("decision decided_at", self.decided_at, minimum=None)
        )
        set_field(
            self,
            "deadline_at",
            _optional_number("decision deadline_at", self.deadline_at, minimum=None),
        )
        set_field(
            self,
            "time_left_s",
            _optional_number("decision time_left_s", self.time_left_s, minimum=None),
        )
        if self.projection is not None:
            set_field(
                self, "projection", dict(check_mapping("decision projection", self.projection))
            )
        held_by = tuple(self.held_by)
        for hold in held_by:
            _require(HeldBy, "decision held_by entry", hold)
        set_field(self, "held_by", held_by)
        self._check_direction()

    def _check_direction(self) -> None:
        """The action must agree with the sizes, and only a hold can be held back."""
        current, target = self.current_nodes, self.target_nodes
        agrees = {
            ScaleAction.HOLD: target == current,
            ScaleAction.SCALE_UP: target > current,
            ScaleAction.SCALE_DOWN: target < current,
        }[self.action]
        if not agrees:
            raise ElasticGridError(
                f"decision action {self.action.value} does not fit current_nodes {current} "
                f"and target_nodes {target}"
            )
        if self.held_by and self.action is not ScaleAction.HOLD:
            raise ElasticGridError(
                f"decision action {self.action.value} cannot be held back; only a hold can"
            )

    @property
    def changed(self) -> bool:
        """Whether this decision changes the job's size."""
        return self.action is not ScaleAction.HOLD

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (the action as its string value); the inverse of :meth:`from_dict`."""
        return {
            "action": self.action.value,
            "current_nodes": self.current_nodes,
            "target_nodes": self.target_nodes,
            "reason": self.reason,
            "rule": self.rule,
            "held_by": [hold.to_dict() for hold in self.held_by],
            "signals": self.signals.to_dict(),
            "thresholds": dict(self.thresholds),
            "decided_at": self.decided_at,
            "deadline_at": self.deadline_at,
            "time_left_s": self.time_left_s,
            "projection": None if self.projection is None else dict(self.projection),
            "cooldown": self.cooldown.to_dict(),
        }

    def to_json(self) -> str:
        """:meth:`to_dict` as a JSON string (strict: no NaN or infinity)."""
        return json.dumps(self.to_dict(), sort_keys=True, allow_nan=False)

    @classmethod
    def from_dict(cls, data: Any) -> ScaleDecision:
        """Rebuild a decision from :meth:`to_dict` output (for example an XCom)."""
        check_mapping("decision", data)
        reject_unknown_keys("decision", data, _DECISION_FIELDS)
        _missing("decision", data, _DECISION_REQUIRED)
        held_entries = data.get("held_by", [])
        if not isinstance(held_entries, list):
            raise ElasticGridError(f"decision held_by must be a list, got {held_entries!r}")
        return cls(
            action=data["action"],
            current_nodes=data["current_nodes"],
            target_nodes=data["target_nodes"],
            reason=data["reason"],
            rule=data["rule"],
            held_by=tuple(HeldBy.from_dict(entry) for entry in held_entries),
            signals=WindowSignals.from_dict(data["signals"]),
            thresholds=data["thresholds"],
            decided_at=data["decided_at"],
            deadline_at=data.get("deadline_at"),
            time_left_s=data.get("time_left_s"),
            projection=data.get("projection"),
            cooldown=CooldownClock.from_dict(data["cooldown"]),
        )

    @classmethod
    def from_json(cls, text: str) -> ScaleDecision:
        """Rebuild a decision from :meth:`to_json` output."""
        try:
            data = json.loads(text)
        except (TypeError, ValueError) as error:
            raise ElasticGridError(f"decision is not valid JSON: {error}") from None
        return cls.from_dict(data)
