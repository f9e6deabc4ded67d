"""The decision model: what one check answers, with the rules it names and its conditions.

A :class:`ScaleDecision` says ``scale_up``, ``scale_down`` or ``hold`` (:class:`ScaleAction`),
the size wanted, the rule that fired (:class:`DecisionRule`), the rules that held it back
(:class:`HeldBy`, :class:`HoldRule`), the projection behind it and its HPA-style
conditions; on a shared grid, what the grid left it (``grid``: room, who holds what) and
``preempted_by``, the job whose shrink request it obeys. ``target_nodes`` is larger than ``current_nodes`` for a scale-up, smaller for a
scale-down and equal for a hold; only a hold can be held back. ``cooldown`` is the clock
*after* the decision (:class:`CooldownClock`), stored by the caller for the next one.

Pure: no Airflow, no I/O. The rules themselves are in ``docs/policy.md``.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ValidationInfo, field_validator, model_validator

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.policy.conditions import ScaleCondition
from elasticgrid_provider.core.policy.grid import GridShare
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.policy.rules import DecisionRule, HoldRule, ScaleAction
from elasticgrid_provider.core.records import Extras, ForwardCompatible, extras_field
from elasticgrid_provider.core.samples import WindowSignals
from elasticgrid_provider.core.validation import (
    Count,
    Finite,
    JsonModel,
    Positive,
    Text,
    choice,
    model,
)


@model
class CooldownClock(ForwardCompatible, JsonModel):
    """When the job last changed size, and how: the whole cooldown state, stored by the caller."""

    WHERE = "cooldown"

    last_change_at: Finite | None = None
    last_action: (
        Annotated[ScaleAction, choice(ScaleAction, ScaleAction.SCALE_UP, ScaleAction.SCALE_DOWN)]
        | None
    ) = None
    extras: Extras = extras_field()

    def seconds_since_change(self, now: float) -> float | None:
        """Seconds from the last change to ``now``; ``None`` when there was none."""
        return None if self.last_change_at is None else now - self.last_change_at


NO_COOLDOWN = CooldownClock()
"""The clock of a job that has never changed size."""


@model
class HeldBy(JsonModel):
    """A rule that stopped a scale change, and why in one sentence."""

    WHERE = "held_by"

    rule: Annotated[HoldRule, choice(HoldRule)]
    reason: Text


@model
class Recommendation(ForwardCompatible, JsonModel):
    """The size one check recommended (before stabilisation), and when."""

    at: Finite
    nodes: Positive
    extras: Extras = extras_field()


def verb(action: ScaleAction) -> str:
    """The action as a phrase of a reason: ``scaling up`` or ``scaling down``."""
    return "scaling up" if action is ScaleAction.SCALE_UP else "scaling down"


@model
class ScaleDecision(ForwardCompatible, JsonModel):
    """One scale decision with everything an auditor needs to check or replay it.

    ``cooldown`` is the clock *after* this decision: store it and pass it to
    the next :func:`~elasticgrid_provider.core.policy.controller.decide`. ``target_nodes`` equals
    ``current_nodes`` for a hold, is larger for ``scale_up`` and smaller for
    ``scale_down``; construction refuses anything else.
    """

    WHERE = "decision"

    action: Annotated[ScaleAction, choice(ScaleAction)]
    current_nodes: Count
    target_nodes: Count
    reason: Text
    rule: Annotated[DecisionRule, choice(DecisionRule)]
    signals: WindowSignals
    thresholds: dict[str, Any]
    decided_at: Finite
    cooldown: CooldownClock
    held_by: tuple[HeldBy, ...] = ()
    deadline_at: Finite | None = None
    time_left_s: Finite | None = None
    projection: dict[str, Any] | None = None
    recommended_nodes: Positive | None = None
    conditions: tuple[ScaleCondition, ...] = ()
    grid: GridShare | None = None
    preempted_by: Text | None = None
    extras: Extras = extras_field()

    @field_validator("thresholds")
    @classmethod
    def _as_used(cls, thresholds: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """A stored record's parameters, checked and with their defaults resolved (an older
        record may lack a newer one); a new decision's come resolved from the policy."""
        if not info.context:
            return thresholds
        return ScalePolicy.model_validate(thresholds).thresholds()

    @model_validator(mode="after")
    def _check_direction(self) -> ScaleDecision:
        """The action must agree with the sizes, and only a hold can be held back."""
        current, target = self.current_nodes, self.target_nodes
        direction = (target > current) - (target < current)  # 1 up, -1 down, 0 hold
        if direction != {ScaleAction.SCALE_UP: 1, ScaleAction.SCALE_DOWN: -1}.get(self.action, 0):
            raise ElasticGridError(
                f"decision action {self.action.value} does not fit current_nodes {current} "
                f"and target_nodes {target}"
            )
        if self.held_by and self.action is not ScaleAction.HOLD:
            raise ElasticGridError(
                f"decision action {self.action.value} cannot be held back; only a hold can"
            )
        return self

    @property
    def changed(self) -> bool:
        """Whether this decision changes the job's size."""
        return self.action is not ScaleAction.HOLD
