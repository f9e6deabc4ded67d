"""The calculator: the sizing rules, from measured load to a recommended size.

As HPA's replica calculator turns metrics into a replica count, these rules turn a
:class:`~elasticgrid_provider.core.policy.situation.Situation` into a
:class:`~elasticgrid_provider.core.policy.situation.Verdict`, each resize priced as a restart
of ``startup_s``. Pure: no Airflow, no I/O. The rules and their maths: docs/policy.md ("Rules,
in order").
"""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from typing import Any

from elasticgrid_provider.core.formatting import bounded_or_none, number_text, seconds_text
from elasticgrid_provider.core.monotone import smallest_satisfying
from elasticgrid_provider.core.policy.decision import HeldBy, verb
from elasticgrid_provider.core.policy.holds import (
    ceiling_hold,
    falling_hold,
    final_stretch_hold,
    floor_hold,
    price_hold,
    settling_hold,
    startup_hold,
    stream_restart_hold,
)
from elasticgrid_provider.core.policy.load import MAX_QUEUE_TREND, LoadEstimate
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.policy.rules import DecisionRule, HoldRule, ScaleAction, WorkBasis
from elasticgrid_provider.core.policy.situation import (
    Situation,
    Verdict,
    change,
    stay,
)
from elasticgrid_provider.core.policy.streams import restart_tradeoff, stream_need, stream_numbers
from elasticgrid_provider.core.policy.throughput import (
    finish_s,
    projected_capacity,
    restart_price_node_s,
    serving_size,
)

SHRINK_MARGIN = 1.5
"""A deadline job shrinks only to a size that fits ``1 - 1.5 * deadline_margin`` of the time
left: half the margin again is the band between a shrink and the next check's growth. It must
also fit ``1 - deadline_margin`` of it when the job scales linearly (a job measured at one size
may: the scaling prior's gain is then a guess), so that the next check does not grow it back
even then."""


def recommend(policy: ScalePolicy, situation: Situation) -> Verdict:
    """The rule that applies to ``situation``, before stabilisation and cooldowns."""
    load = situation.load
    if situation.work is not None and situation.deadline_at is not None:
        return deadline_rule(policy, situation)
    if load is not None and load.open_loop:
        return demand_rule(policy, situation, load)
    if load is not None:
        return closed_loop_rule(policy, situation, load)
    why = "the samples show no work to size from; hold the current size"
    return stay(DecisionRule.BALANCED, why, situation.current)


def deadline_rule(policy: ScalePolicy, situation: Situation) -> Verdict:
    work, time_left = situation.work, situation.time_left_s
    assert work is not None and time_left is not None  # guarded by _policy
    current = situation.current
    if work.amount <= 0:
        return stay(
            DecisionRule.BALANCED,
            f"no work is left ({work.phrase}); hold the current size",
            current,
        )
    budget = (1.0 - policy.deadline_margin) * time_left
    finish_now = finish_s(policy, situation, work, current)
    numbers: dict[str, Any] = {"deadline_budget_s": budget}  # _projection adds the finishes
    left_text = f"{seconds_text(time_left)} are left" if time_left > 0 else "no time is left"
    explanation = (
        f"at {current} nodes {work.phrase} take {seconds_text(finish_now)} and {left_text} "
        f"({seconds_text(max(budget, 0.0))} after the {policy.deadline_margin:.0%} margin)"
    )

    def fits(nodes: int, budget_s: float, *, worst_case: bool = False) -> bool:
        """``nodes`` finish within ``budget_s``, the restart included."""
        finish = finish_s(policy, situation, work, nodes, worst_case=worst_case)
        return policy.startup_s + finish <= budget_s

    def shrink_fits(nodes: int) -> bool:
        """:data:`SHRINK_MARGIN`: the projection with half the margin again spare, and the
        worst case (linear scaling below the one size measured) within the margin."""
        shrink_budget = (1.0 - SHRINK_MARGIN * policy.deadline_margin) * time_left
        return fits(nodes, shrink_budget) and fits(nodes, budget, worst_case=True)

    if finish_now <= budget:
        smallest = smallest_satisfying(shrink_fits, policy.min_nodes, current - 1)
        if smallest is None or smallest > current * (1.0 - policy.tolerance):
            why = f"{explanation}: on track; hold the current size"
            return stay(DecisionRule.BALANCED, why, current, numbers)
        finish_target = finish_s(policy, situation, work, smallest)
        cost_now = current * finish_now
        saved = cost_now - smallest * finish_target
        price = restart_price_node_s(policy, current, smallest)
        finish = finish_target + policy.startup_s
        numbers.update(gain=saved, gain_unit="node-seconds", price=price)
        why = (
            f"{explanation}; {smallest} nodes finish in {seconds_text(finish)} with the "
            f"restart and save {number_text(saved)} node-seconds against a restart price "
            f"of {number_text(price)}"
        )
        worth = None
        if saved < policy.tolerance * cost_now:
            worth = HeldBy(
                HoldRule.RESTART_COST,
                f"saving {number_text(saved)} node-seconds is within the "
                f"{policy.tolerance:.0%} tolerance of the {number_text(cost_now)} node-seconds "
                "left to pay",
            )
        held: list[HeldBy | None] = [
            floor_hold(policy, current),
            final_stretch_hold(policy, situation),
            price_hold(policy, saved, price, "node-seconds") or worth,
        ]
        return change(
            DecisionRule.DEADLINE_SLACK, why, ScaleAction.SCALE_DOWN, smallest, held, numbers
        )
    smallest = smallest_satisfying(lambda nodes: fits(nodes, budget), current + 1, policy.max_nodes)
    # when no resize fits in the budget, the most nodes finish soonest
    target = max(policy.max_nodes, current) if smallest is None else smallest
    finish = finish_s(policy, situation, work, target) + policy.startup_s
    if smallest is None:
        why = f"{explanation}; even {target} nodes need {seconds_text(finish)} with the restart"
        why += ", so the deadline will be missed"
    else:
        why = f"{explanation}; {target} nodes finish in {seconds_text(finish)} with the restart"
    held = [ceiling_hold(policy, current), startup_hold(policy, situation)]
    return change(DecisionRule.DEADLINE_PRESSURE, why, ScaleAction.SCALE_UP, target, held, numbers)


def demand_rule(policy: ScalePolicy, situation: Situation, load: LoadEstimate) -> Verdict:
    """An open loop: the smallest size covering the demand's recent peak plus the band (a
    stream, :func:`stream_need`), or a backlog that would not drain within ``drain_s``."""
    current = situation.current
    basis, demand, capacity = load.basis, load.demand_per_s, load.capacity_per_s
    drain = load.drain_s
    need, band = stream_need(policy, situation, load)
    backlog_text = ""
    backlog = f"; the backlog of {seconds_text(load.backlog_s)}"
    if load.backlog_s > 0:
        if drain is not None and drain <= policy.drain_s:
            backlog_text = f"{backlog} drains in {seconds_text(drain)}, so it needs no more nodes"
        else:
            # a resize serves nothing for startup_s while work keeps arriving; serve the
            # work waiting after it within drain_s (not demand + waiting: see the notes)
            usable_s = max(policy.drain_s - policy.startup_s, policy.drain_s / 2.0)
            waiting = load.backlog_s * capacity + demand * policy.startup_s
            drain_need = max(demand, waiting / usable_s)
            grows = load.utilisation >= 1.0 or load.backlog_trend > 0
            stay_s = math.inf if drain is None else drain
            serving = serving_size(policy, situation, basis, drain_need)
            after_s = _drain_after_resize(policy, situation, load, serving)
            if grows or stay_s >= (1.0 + policy.resize_margin) * max(after_s, policy.drain_s):
                need = max(need, drain_need)
                trend = "grows" if grows else "will not drain"
                backlog_text = f"{backlog} {trend} within {seconds_text(policy.drain_s)}"
            else:
                backlog_text = (
                    f"{backlog} drains in {seconds_text(stay_s)}, and a restart would not "
                    "clear it much sooner"
                )
    target = serving_size(policy, situation, basis, need)
    numbers = {
        **load.model_dump(),
        "target_capacity_per_s": projected_capacity(policy, situation, basis, target),
        "needed_per_s": need,
        "band": band,
        "arrival_spread": situation.arrival_spread,
        **stream_numbers(policy, situation, basis, need),
    }
    why = (
        f"demand {number_text(demand)} {basis}/s against a capacity of "
        f"{number_text(capacity)} {basis}/s at {current} nodes "
        f"({load.utilisation:.0%} utilised){backlog_text}"
    )
    verdict = _sized(
        policy, situation, DecisionRule.DEMAND, why, target, need / capacity, numbers, basis
    )
    previous = situation.recent[-1].nodes if situation.recent else None
    speeding = _queue_speeding_up(policy, situation)
    held: list[HeldBy | None] = list(verdict.held_by)
    unsettled = None  # why a scale-up waits for the next check
    if verdict.action is ScaleAction.SCALE_UP:
        if speeding is not None and load.backlog_s < policy.drain_s / 2.0:
            # the trend mixes steps from before and after a rise: half-measured
            unsettled = (
                f"the queue's growth is still speeding up: the newest steps imply "
                f"{speeding:.0%} more demand than the ones before them; the next step "
                "measures the load once more"
            )
        elif previous is None or previous <= current:
            unsettled = (
                "the first check to find the load above the capacity; the next check "
                "confirms it with more of the new load measured"
            )
        elif (
            verdict.recommended is not None
            and previous < verdict.recommended * (1.0 - policy.tolerance)
            and load.backlog_s < policy.drain_s / 2.0
        ):
            unsettled = (
                f"the load is still rising: {verdict.recommended} nodes now, {previous} at "
                "the last check; the backlog is short enough to measure it once more"
            )
    if unsettled is not None:
        held.append(HeldBy(HoldRule.STABILISATION, unsettled))
    if verdict.action is ScaleAction.SCALE_DOWN and verdict.target is not None:
        after_s = _drain_after_resize(policy, situation, load, verdict.target)
        if after_s > policy.drain_s:
            why = (
                f"at {verdict.target} nodes the backlog, with the restart's, would take "
                f"{seconds_text(min(after_s, sys.float_info.max))} to drain, more than "
                f"{seconds_text(policy.drain_s)}"
            )
            held.append(HeldBy(HoldRule.RESTART_COST, why))
    if verdict.action is ScaleAction.SCALE_DOWN:
        held.append(falling_hold(load, basis))
        held.append(_settling(policy, situation, load, verdict.target))
    return replace(verdict, held_by=tuple(hold for hold in held if hold is not None))


def _settling(
    policy: ScalePolicy, situation: Situation, load: LoadEstimate, target: int | None
) -> HeldBy | None:
    """A stream's shrink held while its window's newer half alone needs fewer nodes."""
    demand = situation.demand
    recent = 0.0 if demand is None else demand.newest_per_s
    if demand is None or target is None or not 0 < recent < demand.rate_per_s:
        return None
    settled = replace(demand, rate_per_s=recent, peak_per_s=recent)
    need, _ = stream_need(policy, replace(situation, demand=settled), load)
    newer = serving_size(policy, situation, load.basis, need)
    return settling_hold(demand, str(load.basis), newer, target)


def _queue_speeding_up(policy: ScalePolicy, situation: Situation) -> float | None:
    """How much more demand (``capacity / (1 - slope)``) the newest queue growth implies than
    the one before it; ``None`` unless the queue grows and that is over ``tolerance``."""
    slopes = situation.queue_slopes
    if len(slopes) < 2 or slopes[-1] <= 0:
        return None
    older, newest = max(slopes[-2], 0.0), min(slopes[-1], MAX_QUEUE_TREND)
    if older >= newest:
        return None
    extra = (1.0 - older) / (1.0 - newest) - 1.0
    return extra if extra > policy.tolerance else None


def _drain_after_resize(
    policy: ScalePolicy, situation: Situation, load: LoadEstimate, target: int
) -> float:
    """Seconds to clear the backlog and the restart's after a resize to ``target``."""
    spare = projected_capacity(policy, situation, load.basis, target) - load.demand_per_s
    waiting = load.backlog_s * load.capacity_per_s + load.demand_per_s * policy.startup_s
    return policy.startup_s + (waiting / spare if spare > 0 else math.inf)


def closed_loop_rule(policy: ScalePolicy, situation: Situation, load: LoadEstimate) -> Verdict:
    signals = situation.signals
    current = situation.current
    basis = load.basis
    numbers = load.model_dump()
    if signals.queue_fraction >= policy.target_queue_fraction:
        why = f"{signals.queue_fraction:.0%} of the step was spent waiting for a worker"
        if signals.mean_active_s <= 0 or signals.queue_fraction >= 1.0:
            target = min(policy.max_nodes, max(current + 1, int(current * policy.scale_up_factor)))
            why += f" and none of it was active, so grow by {policy.scale_up_factor:g}x"
        else:
            # the queue counts the workers the step waited for: that many more remove it
            workers = math.ceil(round(current / (1.0 - signals.queue_fraction), 9))
            target = min(policy.max_nodes, max(current, workers))
            why += f"; {workers} nodes would remove the wait"
        numbers["target_capacity_per_s"] = projected_capacity(policy, situation, basis, target)
        return _sized(
            policy,
            situation,
            DecisionRule.QUEUE_BOUND,
            why,
            target,
            load.utilisation,
            numbers,
            basis,
        )
    if (
        0 < signals.mean_step_s <= policy.idle_step_fraction * policy.target_step_s
        and signals.queue_fraction <= policy.idle_queue_fraction
    ):
        why = (
            f"the mean step of {seconds_text(signals.mean_step_s)} is at most "
            f"{policy.idle_step_fraction:.0%} of the {seconds_text(policy.target_step_s)} target "
            f"and {signals.queue_fraction:.0%} of it was spent waiting for a worker"
        )
        if current <= policy.min_nodes:
            held = [floor_hold(policy, current)]
            return change(DecisionRule.IDLE, why, ScaleAction.SCALE_DOWN, current, held, numbers)
        step_goal = policy.target_step_s / (1.0 + policy.headroom)
        capacity_now = load.capacity_per_s
        deepest = min(current - 1, math.ceil(current * policy.scale_down_factor))
        floor = max(policy.min_nodes, deepest)
        smallest = smallest_satisfying(
            lambda nodes: (
                signals.mean_step_s
                * capacity_now
                / max(projected_capacity(policy, situation, basis, nodes), 1e-300)
                <= step_goal
            ),
            floor,
            current,
        )
        target = current if smallest is None else smallest
        numbers["target_capacity_per_s"] = projected_capacity(policy, situation, basis, target)
        ratio = numbers["target_capacity_per_s"] / capacity_now
        return _sized(policy, situation, DecisionRule.IDLE, why, target, ratio, numbers, basis)
    return stay(
        DecisionRule.BALANCED, "the step is balanced; hold the current size", current, numbers
    )


def _sized(
    policy: ScalePolicy,
    situation: Situation,
    rule: DecisionRule,
    why: str,
    target: int,
    ratio: float,
    numbers: dict[str, Any],
    basis: WorkBasis,
) -> Verdict:
    """A demand-sized target, with the tolerance band and the restart price applied."""
    current = situation.current
    numbers["capacity_ratio"] = bounded_or_none(ratio)
    if target == current and ratio > 1.0 + policy.tolerance and current >= policy.max_nodes:
        held_up = [ceiling_hold(policy, current), startup_hold(policy, situation)]
        return change(rule, why, ScaleAction.SCALE_UP, current, held_up, numbers)
    if target == current or abs(ratio - 1.0) <= policy.tolerance:
        suffix = f"within the {policy.tolerance:.0%} tolerance" if target != current else "it fits"
        return stay(rule, f"{why}; {suffix}, hold the current size", current, numbers)
    work = situation.work
    if work is not None and work.basis == basis:
        horizon = finish_s(policy, situation, work, current)
    else:
        horizon = policy.horizon_s
    capacity_now = projected_capacity(policy, situation, basis, current)
    capacity_target = projected_capacity(policy, situation, basis, target)
    numbers["horizon_s"] = bounded_or_none(horizon)
    if target > current:
        action = ScaleAction.SCALE_UP
        gain = horizon * (1.0 - capacity_now / capacity_target) if capacity_target > 0 else 0.0
        price, unit = policy.startup_s, "seconds"
        # a stream whose work piles up must keep up: the restart is priced into its target
        held: list[HeldBy | None] = [
            ceiling_hold(policy, current),
            startup_hold(policy, situation),
            None if rule is DecisionRule.DEMAND else price_hold(policy, gain, price, unit),
        ]
    else:
        action = ScaleAction.SCALE_DOWN
        if rule is DecisionRule.DEMAND:
            gain, _, horizon = restart_tradeoff(policy, situation, target)
            numbers["horizon_s"] = bounded_or_none(horizon)
        else:
            served = horizon * capacity_now
            gain = current * horizon - target * (
                served / capacity_target if capacity_target > 0 else sys.float_info.max
            )
        price, unit = restart_price_node_s(policy, current, target), "node-seconds"
        if rule is DecisionRule.DEMAND:
            paid = stream_restart_hold(policy, gain, price, horizon)
        else:
            paid = price_hold(policy, gain, price, unit)
        held = [floor_hold(policy, current), final_stretch_hold(policy, situation), paid]
    numbers.update({"gain": bounded_or_none(gain), "gain_unit": unit, "price": price})
    why += f"; {verb(action)} pays {number_text(gain)} {unit} for a {number_text(price)}"
    why += f" {unit} restart over {seconds_text(horizon)}"
    return change(rule, why, action, target, held, numbers)
