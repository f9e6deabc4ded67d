"""What holds a scale change back: every hold is here, one function per case.

Each returns a :class:`HeldBy` (the rule and one sentence) or ``None``: ``ceiling`` and
``floor`` (the bounds), ``deadline`` (new nodes cannot start before it), ``final_stretch``
(no shrink near the deadline, only for a job with work left), ``restart_cost`` (the gain
does not beat the restart price by ``resize_margin``; for a stream, the saving until the
next expected change), ``stabilisation`` (:func:`stabilised`: the highest recommendation
within the scale-down window, a stream's from its restart price; :func:`falling_hold`; a
rise still being measured), ``cooldown`` (a recent change), ``capacity`` (the shared grid
has no free node for it, :mod:`.grid`). The controller applies them. Pure: no Airflow, no I/O.
"""

from __future__ import annotations

from elasticgrid_provider.core.formatting import number_text, seconds_text
from elasticgrid_provider.core.policy.decision import HeldBy
from elasticgrid_provider.core.policy.grid import GridShare
from elasticgrid_provider.core.policy.load import LoadEstimate, StreamDemand
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
    """No shrink near the deadline, for a job with work left (a stream never ends: never)."""
    time_left = situation.time_left_s
    if situation.work is None or situation.work.amount <= 0:
        return None
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


def is_stream(situation: Situation) -> bool:
    """Work arrives on its own clock and no deadline ends it: a stream."""
    load = situation.load
    return load is not None and load.open_loop and situation.work is None


def scale_down_window_s(policy: ScalePolicy, situation: Situation) -> float:
    """The scale-down stabilisation window: a stream's from its restart price
    (:attr:`ScalePolicy.stream_window_s`), any other job's ``scale_down_window_s``."""
    return policy.stream_window_s if is_stream(situation) else policy.scale_down_window_s


def stabilised(
    policy: ScalePolicy, situation: Situation, target: int, newest: int
) -> tuple[int, HeldBy | None, str]:
    """A scale-down to ``target`` (``newest``: this check's recommendation) stabilised as HPA
    does: the highest recommendation within the window is the target; held while that is
    the current size or more, or while the recommendations are still falling beyond the
    tolerance. Returns the target, the hold (or None) and what to add to the reason."""
    window_s = scale_down_window_s(policy, situation)
    window_start = situation.now - window_s
    wanted = [r.nodes for r in situation.recent if window_start <= r.at <= situation.now]
    highest = max([target, *wanted])
    within = f"within the last {seconds_text(window_s)}"
    if highest < situation.current and newest < highest * (1.0 - policy.tolerance):
        falling = f"the recommendations are still falling: {newest} nodes now, {highest}"
        return target, HeldBy(HoldRule.STABILISATION, f"{falling} {within}"), ""
    if highest >= situation.current:
        held = HeldBy(HoldRule.STABILISATION, f"{highest} nodes were recommended {within}")
        return target, held, ""
    if highest > target:
        return (
            highest,
            None,
            f"; {highest} nodes, the largest size recommended {within}, is the target",
        )
    return target, None, ""


def falling_hold(load: LoadEstimate, unit: str) -> HeldBy | None:
    """A shrink waits while the newer half of the window arrives slower than the whole."""
    if not load.falling:
        return None
    return HeldBy(
        HoldRule.STABILISATION,
        f"the load is still falling: the newer half of the window arrives at "
        f"{number_text(load.recent_demand_per_s)} {unit}/s, the whole at "
        f"{number_text(load.window_demand_per_s)}",
    )


def settling_hold(demand: StreamDemand, unit: str, newer_nodes: int, target: int) -> HeldBy | None:
    """A stream's shrink waits while the newer half of its arrivals since the rate changed
    (:attr:`StreamDemand.newest_per_s`) alone needs fewer nodes than the level: the level
    still mixes an older, higher rate, and a shrink now would take a second one to reach
    the size the new rate needs."""
    if newer_nodes >= target:
        return None
    return HeldBy(
        HoldRule.STABILISATION,
        f"the rate is still settling: the newer half of the arrivals comes at "
        f"{number_text(demand.newest_per_s)} {unit}/s, which {newer_nodes} nodes cover, "
        f"all of them at {number_text(demand.rate_per_s)}, which needs {target}; one "
        "shrink waits for the size the new rate needs",
    )


def stream_restart_hold(
    policy: ScalePolicy, saving: float, price: float, steady_s: float
) -> HeldBy | None:
    """A stream resizes only when the node-seconds it saves until the next expected change
    (``steady_s`` away) beat the restart price by ``resize_margin``."""
    needed = price * (1.0 + policy.resize_margin)
    if saving > 0 and saving >= needed:
        return None
    return HeldBy(
        HoldRule.RESTART_COST,
        f"saving {number_text(max(saving, 0.0))} node-seconds over the "
        f"{seconds_text(steady_s)} until the next expected change does not beat the restart "
        f"price of {number_text(price)} node-seconds by the {policy.resize_margin:.0%} margin",
    )
