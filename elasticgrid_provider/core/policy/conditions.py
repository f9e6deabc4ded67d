"""The scaling conditions of a decision, as Kubernetes' HorizontalPodAutoscaler reports them.

The controller (:func:`~elasticgrid_provider.core.policy.controller.decide`) computes them once,
where the decision is made, and the record keeps them; the UI and the CLI only render them.
Each is a type, a status (True/False), a CamelCase reason and a one-sentence message:
``AbleToScale``, ``ScalingActive``, ``ScalingLimited`` and, for streams, ``DemandCovered``
(:attr:`ConditionType.healthy_status` says which status is the healthy one). A hold for the
shared grid's capacity is named "grid capacity" in the message, never the policy's
``max_nodes``. Each condition's reasons: docs/policy.md ("Conditions"). Pure: no Airflow, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from elasticgrid_provider.core.formatting import clock_text, number_text, seconds_text
from elasticgrid_provider.core.policy.grid import CAPACITY_REASON, GRID_CAPACITY
from elasticgrid_provider.core.policy.rules import DecisionRule, HoldRule
from elasticgrid_provider.core.validation import Choice, Flag, JsonModel, Text, choice, model


class ConditionType(Choice):
    """The three conditions every decision records."""

    ABLE_TO_SCALE = "AbleToScale"
    SCALING_ACTIVE = "ScalingActive"
    SCALING_LIMITED = "ScalingLimited"
    DEMAND_COVERED = "DemandCovered"

    @property
    def healthy_status(self) -> bool:
        """The status that needs no attention (the UI colours by it)."""
        return self is not ConditionType.SCALING_LIMITED


# the reason AbleToScale gives for a hold by each rule (ceiling and floor are ScalingLimited's)
HOLD_REASONS = {
    HoldRule.STABILISATION: "Stabilising",
    HoldRule.RESTART_COST: "RestartNotWorthIt",
    HoldRule.DEADLINE: "NoTimeToStart",
    HoldRule.FINAL_STRETCH: "FinalStretch",
    HoldRule.CAPACITY: "NoFreeNodes",
}
BOUND_RULES = (HoldRule.CEILING, HoldRule.FLOOR)
HOLD_NAMES = {HoldRule.CAPACITY: GRID_CAPACITY}  # a rule named otherwise than by its value


@model
class ScaleCondition(JsonModel):
    """One condition of a decision (docs/policy.md, "Conditions")."""

    WHERE = "condition"

    type: Annotated[ConditionType, choice(ConditionType)]
    status: Flag
    reason: Text
    message: Text


def able_to_scale(
    *,
    changed: bool,
    verb: str,
    current: int,
    target: int,
    holds: Sequence[tuple[HoldRule, str]],
    cooldown_until: float | None,
) -> ScaleCondition:
    """Whether a hold other than a bound stops the change the policy wants (docs/policy.md,
    "Conditions").

    ``verb``: "scale-up" or "scale-down", the direction wanted; ``holds``: (rule, reason)
    pairs in the order the policy found them; ``cooldown_until``: when the cooldown ends.
    """
    if changed:
        message = f"the {verb} {current} -> {target} is made now; its cooldown starts"
        return ScaleCondition(ConditionType.ABLE_TO_SCALE, True, "SucceededRescale", message)
    blocking = [(rule, why) for rule, why in holds if rule not in BOUND_RULES]
    if not blocking:
        message = "no cooldown, stabilisation, restart price or deadline holds a change back"
        return ScaleCondition(ConditionType.ABLE_TO_SCALE, True, "ReadyForNewScale", message)
    rule = blocking[0][0]
    if rule is HoldRule.COOLDOWN:
        reason = "BackoffUp" if verb == "scale-up" else "BackoffDown"
    else:
        reason = HOLD_REASONS.get(rule, "Held")
    parts = []
    for held_rule, why in blocking:
        until = ""
        if held_rule is HoldRule.COOLDOWN and cooldown_until is not None:
            until = f" until {clock_text(cooldown_until)}"
        parts.append(f"held by {HOLD_NAMES.get(held_rule, held_rule)}{until}: {why}")
    return ScaleCondition(ConditionType.ABLE_TO_SCALE, False, reason, "; ".join(parts))


def scaling_active(*, rule: DecisionRule, why: str, samples: int, measured: bool) -> ScaleCondition:
    """Whether the window measured enough to compute a size (docs/policy.md, "Conditions")."""
    if rule is DecisionRule.MIN_SAMPLES:
        return ScaleCondition(ConditionType.SCALING_ACTIVE, False, "NotEnoughSamples", why)
    if rule is DecisionRule.PREEMPTED:
        message = "the size is set by a higher-priority job's shrink request, not by the samples"
        return ScaleCondition(ConditionType.SCALING_ACTIVE, True, "ShrinkRequested", message)
    if not measured:
        message = f"the {samples} samples show no work to size from"
        return ScaleCondition(ConditionType.SCALING_ACTIVE, False, "NoWorkMeasured", message)
    noun = "sample" if samples == 1 else "samples"
    message = f"the size is computed from {samples} {noun} by the {rule} rule"
    return ScaleCondition(ConditionType.SCALING_ACTIVE, True, "ValidMetricFound", message)


def scaling_limited(
    *,
    current: int,
    recommended: int | None,
    unclamped: int | None,
    min_nodes: int,
    max_nodes: int,
    grid_limit: str | None = None,
) -> ScaleCondition:
    """True only when the recommendation was clamped to a bound or by the shared grid
    (docs/policy.md, "Conditions").

    ``unclamped``: what the policy would recommend without ``min_nodes``/``max_nodes``
    (None when not asked: the recommendation is at no bound, or there is none);
    ``grid_limit``: the sentence saying what the shared grid left, when it limited a scale-up.
    """
    bounds = f"min_nodes={min_nodes}, max_nodes={max_nodes}"
    if current < min_nodes:
        message = f"the job runs {current} nodes, below the floor: raised to min_nodes={min_nodes}"
        return ScaleCondition(ConditionType.SCALING_LIMITED, True, "TooFewNodes", message)
    if current > max_nodes:
        message = f"the job runs {current} nodes, above the ceiling: cut to max_nodes={max_nodes}"
        return ScaleCondition(ConditionType.SCALING_LIMITED, True, "TooManyNodes", message)
    if grid_limit is not None:
        return ScaleCondition(ConditionType.SCALING_LIMITED, True, CAPACITY_REASON, grid_limit)
    if recommended is not None and unclamped is not None:
        if unclamped > recommended == max_nodes:
            message = (
                f"the policy wants {number_text(unclamped)} nodes, clamped to the ceiling "
                f"max_nodes={max_nodes}"
            )
            return ScaleCondition(ConditionType.SCALING_LIMITED, True, "TooManyNodes", message)
        if unclamped < recommended == min_nodes:
            message = (
                f"the policy wants {number_text(unclamped)} nodes, clamped to the floor "
                f"min_nodes={min_nodes}"
            )
            return ScaleCondition(ConditionType.SCALING_LIMITED, True, "TooFewNodes", message)
    if recommended is None:
        message = f"no size recommended yet ({bounds})"
    else:
        message = f"the recommended {recommended} nodes are within the bounds ({bounds})"
    return ScaleCondition(ConditionType.SCALING_LIMITED, False, "DesiredWithinRange", message)


def demand_covered(
    numbers: dict[str, Any], *, basis: str, current: int, capacity: float
) -> ScaleCondition:
    """A stream's sizing in one sentence, from the numbers the policy computed
    (:func:`~elasticgrid_provider.core.policy.calculator.stream_numbers`)."""
    peak = float(numbers["demand_peak_per_s"])
    covering = int(numbers["covering_nodes"])
    parts = [
        f"demand {number_text(numbers['demand_rate_per_s'])} {basis}/s, peak "
        f"{number_text(peak)} over the newest {seconds_text(numbers['peak_window_s'])}; "
        f"with the {float(numbers['band']):.0%} band {covering} nodes cover it "
        f"({number_text(numbers['covering_capacity_per_s'])} {basis}/s)"
    ]
    price = float(numbers.get("restart_price_node_s") or 0.0)
    saving = numbers.get("saving_node_s")
    if covering < current and saving is not None:
        parts.append(
            f"restart trade-off: {number_text(saving)} node-seconds saved over the "
            f"{seconds_text(numbers['steady_s'])} until the next expected change against a "
            f"restart price of {number_text(price)}"
        )
    elif covering > current:
        parts.append(f"a restart price of {number_text(price)} node-seconds, paid to keep up")
    parts.append(f"prior: {numbers['prior_source']}")
    covered = capacity >= peak
    reason = "PeakCovered" if covered else "BelowPeak"
    return ScaleCondition(ConditionType.DEMAND_COVERED, covered, reason, "; ".join(parts))
