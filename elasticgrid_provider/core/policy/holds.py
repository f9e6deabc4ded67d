"""What holds a scale change back, one function per :class:`HoldRule`.

Each returns a :class:`HeldBy` (the rule and one sentence) or ``None``: ``ceiling`` and
``floor`` (the bounds), ``deadline`` (new nodes cannot start before it), ``final_stretch``
(no shrink near the deadline), ``restart_cost`` (the gain does not beat the restart price
by ``resize_margin``), ``cooldown`` (a recent change), ``capacity`` (the shared grid has no
free node for it, :mod:`.grid`). Pure: no Airflow, no I/O.
"""

from __future__ import annotations

from elasticgrid_provider.core.formatting import number_text, seconds_text
from elasticgrid_provider.core.policy.decision import HeldBy
from elasticgrid_provider.core.policy.grid import GridShare
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.policy.rules import HoldRule, ScaleAction
from elasticgrid_provider.core.policy.situation import Situation


def ceiling_hold(policy: ScalePolicy, current: int) -> HeldBy | None:
    if current < policy.max_nodes:
        return None
    return HeldBy(HoldRule.CEILING, f"already at the node ceiling of {policy.max_nodes}")


def floor_hold(policy: ScalePolicy, current: int) -> HeldBy | None:
    if current > policy.min_nodes:
        return None
    return HeldBy(HoldRule.FLOOR, f"already at the node floor of {policy.min_nodes}")


def startup_hold(policy: ScalePolicy, situation: Situation) -> HeldBy | None:
    """New nodes are useless when the deadline comes before they can start."""
    time_left = situation.time_left_s
    if time_left is None or time_left > policy.startup_s:
        return None
    if time_left <= 0:
        return HeldBy(HoldRule.DEADLINE, "no time is left before the deadline")
    comparison = "less than" if time_left < policy.startup_s else "no more than"
    return HeldBy(
        HoldRule.DEADLINE,
        f"only {seconds_text(time_left)} left before the deadline, {comparison} the "
        f"{seconds_text(policy.startup_s)} new nodes need to start",
    )


def final_stretch_hold(policy: ScalePolicy, situation: Situation) -> HeldBy | None:
    time_left = situation.time_left_s
    stretch = policy.effective_final_stretch_s
    if time_left is None or time_left > stretch:
        return None
    return HeldBy(
        HoldRule.FINAL_STRETCH,
        f"only {seconds_text(max(time_left, 0.0))} left before the deadline, within the "
        f"final {seconds_text(stretch)} where the job never shrinks",
    )


def price_hold(policy: ScalePolicy, gain: float, price: float, unit: str) -> HeldBy | None:
    needed = price * (1.0 + policy.resize_margin)
    if gain > 0 and gain >= needed:
        return None
    return HeldBy(
        HoldRule.RESTART_COST,
        f"the projected gain of {number_text(max(gain, 0.0))} {unit} does not beat the "
        f"restart price of {number_text(price)} {unit} by the "
        f"{policy.resize_margin:.0%} margin",
    )


def cooldown_hold(policy: ScalePolicy, situation: Situation, action: ScaleAction) -> HeldBy | None:
    if action is ScaleAction.SCALE_UP:
        kind, cooldown_s = "scale-up", policy.cooldown_s
    else:
        kind, cooldown_s = "scale-down", policy.effective_scale_down_cooldown_s
    elapsed = situation.cooldown.seconds_since_change(situation.now)
    if elapsed is None or cooldown_s <= 0 or elapsed >= cooldown_s:
        return None
    if elapsed >= 0:
        since = f"last change {seconds_text(elapsed)} ago"
    else:
        since = f"last change is recorded {seconds_text(-elapsed)} in the future"
    return HeldBy(
        HoldRule.COOLDOWN, f"in cooldown: {since}, {kind} cooldown is {seconds_text(cooldown_s)}"
    )


def capacity_hold(grid: GridShare, current: int, wanted: int) -> HeldBy:
    """The shared grid leaves no node above ``current`` for a scale-up to ``wanted``."""
    return HeldBy(
        HoldRule.CAPACITY,
        f"the shared grid has no free node for it: {grid.shortfall(current, wanted)}",
    )
