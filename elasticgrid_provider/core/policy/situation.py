"""One decision's inputs, and what a rule concludes from them.

:class:`Situation` holds the checked inputs of one decision and what the window
measured; a rule of :mod:`~elasticgrid_provider.core.policy.calculator` answers a
:class:`Verdict`: the change it wants (if any), what held it back and its numbers. The
controller turns the verdict into the decision. Pure: no Airflow, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from elasticgrid_provider.core.formatting import number_text
from elasticgrid_provider.core.policy.decision import CooldownClock, HeldBy, Recommendation
from elasticgrid_provider.core.policy.grid import GridShare
from elasticgrid_provider.core.policy.load import LoadEstimate, StreamDemand
from elasticgrid_provider.core.policy.memory import CapacityMemory
from elasticgrid_provider.core.policy.rules import DecisionRule, ScaleAction, WorkBasis
from elasticgrid_provider.core.samples import WindowSignals


@dataclass(frozen=True)
class RemainingWork:
    """The work left before the deadline."""

    basis: WorkBasis
    amount: float

    @property
    def phrase(self) -> str:
        return f"the remaining {number_text(self.amount)} {self.basis}"


@dataclass(frozen=True)
class Situation:
    """The validated inputs of one decision, and what the window measured."""

    signals: WindowSignals
    current: int
    now: float
    cooldown: CooldownClock
    deadline_at: float | None
    work: RemainingWork | None
    load: LoadEstimate | None
    memory: CapacityMemory
    recent: tuple[Recommendation, ...]
    arrival_spread: float = 0.0
    queue_slopes: tuple[float, ...] = ()
    """The slope of ``queue_s`` over time between each pair of the newest steps, oldest first."""
    grid: GridShare | None = None
    """What the shared grid leaves the job (None: alone on its grid)."""
    demand: StreamDemand | None = None
    """A stream's demand level and recent peak (None for any other job)."""

    @property
    def time_left_s(self) -> float | None:
        return None if self.deadline_at is None else self.deadline_at - self.now


@dataclass(frozen=True)
class Verdict:
    """What a rule concluded: the change it wants (if any), what held it back, its numbers."""

    rule: DecisionRule
    why: str
    action: ScaleAction = ScaleAction.HOLD
    target: int | None = None
    held_by: tuple[HeldBy, ...] = ()
    recommended: int | None = None
    numbers: dict[str, Any] = field(default_factory=dict)
    capacity_limit: int | None = None
    """The room on the shared grid that clamped or held a scale-up (:mod:`.grid`), or None."""


def stay(
    rule: DecisionRule, why: str, current: int, numbers: dict[str, Any] | None = None
) -> Verdict:
    """A verdict keeping the current size."""
    return Verdict(rule, why, recommended=current, numbers=numbers or {})


def change(
    rule: DecisionRule,
    why: str,
    action: ScaleAction,
    target: int,
    holds: Sequence[HeldBy | None],
    numbers: dict[str, Any],
) -> Verdict:
    """A verdict wanting ``target``, held back by those of ``holds`` that apply."""
    held = tuple(hold for hold in holds if hold is not None)
    return Verdict(rule, why, action, target, held, recommended=target, numbers=numbers)
