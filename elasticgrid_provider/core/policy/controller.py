"""The controller: one decision from a window, as HPA's horizontal controller makes it.

:func:`decide` applies the rules in their documented order and computes the decision's
conditions once, here, where it is made; the UI and the CLI only print them. Pure: the
caller passes ``now``, the deadline and the clock, and stores the result, so any process
decides alike and a record replays from its inputs. The rules: docs/policy.md ("Rules, in
order", "Stabilisation", "On a shared grid").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.formatting import bounded_or_none, seconds_text
from elasticgrid_provider.core.policy.calculator import recommend
from elasticgrid_provider.core.policy.conditions import (
    ScaleCondition,
    able_to_scale,
    demand_covered,
    scaling_active,
    scaling_limited,
)
from elasticgrid_provider.core.policy.decision import (
    NO_COOLDOWN,
    CooldownClock,
    Recommendation,
    ScaleDecision,
    verb,
)
from elasticgrid_provider.core.policy.grid import GridShare
from elasticgrid_provider.core.policy.holds import (
    capacity_hold,
    cooldown_hold,
    floor_hold,
    scale_down_window_s,
    stabilised,
)
from elasticgrid_provider.core.policy.load import (
    TREND_SAMPLES,
    arrival_spread,
    estimate_load,
    queue_slopes,
    since_rate_change,
    stream_demand,
)
from elasticgrid_provider.core.policy.memory import NO_MEASUREMENTS, CapacityMemory
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.policy.rules import DecisionRule, ScaleAction, WorkBasis
from elasticgrid_provider.core.policy.situation import (
    RemainingWork,
    Situation,
    Verdict,
    change,
)
from elasticgrid_provider.core.policy.throughput import finish_s, restart_price_node_s
from elasticgrid_provider.core.samples import MetricsWindow
from elasticgrid_provider.core.validation import check_integer, check_number

UNBOUNDED_FACTOR = 1024
"""The ceiling of the unbounded policy that tells whether a bound clamped a recommendation,
as a multiple of the larger of ``max_nodes`` and the current size."""


def _optional_number(field_name: str, value: Any, *, minimum: float | None) -> float | None:
    """``None`` stays ``None``; anything else must be a finite number."""
    return None if value is None else check_number(field_name, value, minimum=minimum)


def _require(kind: type, field_name: str, value: Any) -> None:
    if not isinstance(value, kind):
        raise ElasticGridError(f"{field_name} must be a {kind.__name__}, got {value!r}")


def decide(
    policy: ScalePolicy,
    window: MetricsWindow,
    *,
    now: float,
    current_nodes: int | None = None,
    cooldown: CooldownClock = NO_COOLDOWN,
    deadline_at: float | None = None,
    remaining_steps: float | None = None,
    remaining_tokens: float | None = None,
    capacity: CapacityMemory = NO_MEASUREMENTS,
    recent: Sequence[Recommendation] = (),
    grid: GridShare | None = None,
) -> ScaleDecision:
    """Decide the job's size from ``window`` at ``now`` (epoch seconds); see ``docs/policy.md``.

    ``current_nodes`` defaults to the newest sample's; ``deadline_at`` is epoch seconds and
    ``remaining_steps`` or ``remaining_tokens`` let the deadline rule project the finish.
    ``capacity``: what the job measured at each size (the window's measurement wins at its
    size); ``recent``: the sizes recent checks recommended (the scale-down stabilisation);
    ``grid``: what the shared grid leaves the job (:mod:`.grid`; None: alone on its grid).
    """
    _require(MetricsWindow, "window", window)
    if grid is not None:
        _require(GridShare, "grid", grid)
    _require(CooldownClock, "cooldown", cooldown)
    _require(CapacityMemory, "capacity", capacity)
    recommended = tuple(recent)
    for entry in recommended:
        _require(Recommendation, "recent recommendation", entry)
    signals = window.signals()
    if current_nodes is None:
        current = signals.nodes
    else:
        current = check_integer("current_nodes", current_nodes, minimum=1)
    deadline = _optional_number("deadline_at", deadline_at, minimum=None)
    steps = _optional_number("remaining_steps", remaining_steps, minimum=0.0)
    tokens = _optional_number("remaining_tokens", remaining_tokens, minimum=0.0)
    load = (
        estimate_load(window.samples, current, arrivals=capacity.arrivals) if current >= 1 else None
    )
    now = check_number("now", now, minimum=None)
    memory = capacity if load is None else capacity.with_measurement(load.measurement(None))
    work = None
    if deadline is None:
        pass
    elif steps is not None and memory.per_node_rate(WorkBasis.STEPS, current, 0.0) > 0:
        work = RemainingWork(WorkBasis.STEPS, steps)
    elif tokens is not None and memory.per_node_rate(WorkBasis.TOKENS, current, 0.0) > 0:
        work = RemainingWork(WorkBasis.TOKENS, tokens)
    if work is not None:
        rate = current * memory.per_node_rate(work.basis, current, 0.0)
        if not math.isfinite(work.amount / rate):
            raise ElasticGridError(
                f"remaining_{work.basis} {work.amount!r} is too large to project a finish time"
            )
    spread = 0.0
    if load is not None and load.open_loop:
        spread = arrival_spread(since_rate_change(window.samples, load.basis), load.basis)
    demand = None
    if load is not None and load.open_loop and work is None:
        demand = stream_demand(window.samples, load, policy.peak_window_s)
    situation = Situation(
        demand=demand,
        signals=signals,
        current=current,
        now=now,
        cooldown=cooldown,
        deadline_at=deadline,
        work=work,
        load=load,
        memory=memory,
        recent=recommended,
        arrival_spread=spread,
        queue_slopes=queue_slopes(window.samples[-TREND_SAMPLES:]),
        grid=grid,
    )
    verdict = (
        _preempted_rule(policy, situation)
        or _min_samples_rule(policy, situation)
        or _bounds_rule(policy, situation)
        or _recommend(policy, situation)
    )
    return _decision(policy, situation, _fitted(situation, verdict))


def _preempted_rule(policy: ScalePolicy, situation: Situation) -> Verdict | None:
    """A shrink request below the current size: shrink to it, never below ``min_nodes``,
    ahead of the cooldowns and the stabilisation window (the reason names what it overrode)."""
    shrink = None if situation.grid is None else situation.grid.shrink
    current = situation.current
    if shrink is None or shrink.to_nodes >= current:
        return None
    target = max(shrink.to_nodes, policy.min_nodes)
    why = (
        f"job {shrink.by_job!r} (priority {shrink.by_priority}) needs nodes this job holds "
        f"and asked it to shrink to {shrink.to_nodes}"
    )
    if target > shrink.to_nodes:
        why += f", no lower than the node floor of {policy.min_nodes}"
    numbers: dict[str, Any] = {"shrink_to_nodes": shrink.to_nodes}
    if target >= current:
        held = [floor_hold(policy, current)]
        return change(DecisionRule.PREEMPTED, why, ScaleAction.SCALE_DOWN, current, held, numbers)
    overridden = []
    cooldown = cooldown_hold(policy, situation, ScaleAction.SCALE_DOWN)
    if cooldown is not None:
        overridden.append(cooldown.reason)
    window_s = scale_down_window_s(policy, situation)
    wanted = [
        r.nodes for r in situation.recent if situation.now - window_s <= r.at <= situation.now
    ]
    if wanted and max(wanted) > target:
        within = seconds_text(window_s)
        overridden.append(f"{max(wanted)} nodes were recommended within the last {within}")
    if overridden:
        why += (
            "; a preemption goes ahead of the cooldowns and the stabilisation window ("
            + "; ".join(overridden)
            + ")"
        )
    return change(DecisionRule.PREEMPTED, why, ScaleAction.SCALE_DOWN, target, [], numbers)


def _fitted(situation: Situation, verdict: Verdict) -> Verdict:
    """A scale-up beyond the room the shared grid leaves: clamped to it, or held by
    ``capacity`` when it leaves no node above the current size (:mod:`.grid`)."""
    grid, current, target = situation.grid, situation.current, verdict.target
    room = None if grid is None else grid.max_nodes
    if grid is None or room is None or verdict.action is not ScaleAction.SCALE_UP:
        return verdict
    if target is None or target <= room or target <= current:
        return verdict
    if room > current:
        why = (
            f"{verdict.why}; the shared grid leaves this job {room} nodes "
            f"({grid.shortfall(current, target)}), so {room} is the target"
        )
        return replace(verdict, why=why, target=room, capacity_limit=room)
    held = (*verdict.held_by, capacity_hold(grid, current, target))
    return replace(verdict, held_by=held, capacity_limit=room)


def _min_samples_rule(policy: ScalePolicy, situation: Situation) -> Verdict | None:
    count = situation.signals.samples
    if count >= policy.min_samples:
        return None
    why = f"not enough samples to decide: {count} of {policy.min_samples}"
    if situation.current == 0:
        why += "; the current size is unknown until a sample arrives"
    return Verdict(DecisionRule.MIN_SAMPLES, why)


def _bounds_rule(policy: ScalePolicy, situation: Situation) -> Verdict | None:
    current = situation.current
    if current < policy.min_nodes:
        why = f"current size {current} is below the floor of {policy.min_nodes}"
        action, target = ScaleAction.SCALE_UP, policy.min_nodes
    elif current > policy.max_nodes:
        why = f"current size {current} is above the ceiling of {policy.max_nodes}"
        action, target = ScaleAction.SCALE_DOWN, policy.max_nodes
    else:
        return None
    if cooldown_hold(policy, situation, action) is not None:
        why += " (bounds corrections ignore the cooldown)"
    return Verdict(DecisionRule.BOUNDS, why, action, target, recommended=target)


def _recommend(policy: ScalePolicy, situation: Situation) -> Verdict:
    """The calculator's verdict, stabilised and held by the cooldowns."""
    return _gated(policy, situation, recommend(policy, situation))


def _gated(policy: ScalePolicy, situation: Situation, verdict: Verdict) -> Verdict:
    """Apply the stabilisation window and the cooldowns to a verdict's change."""
    if verdict.action is ScaleAction.HOLD or verdict.target is None:
        return verdict
    held, target, why = list(verdict.held_by), verdict.target, verdict.why
    if verdict.action is ScaleAction.SCALE_DOWN and target < situation.current:
        newest = verdict.recommended if verdict.recommended is not None else target
        target, hold, more = stabilised(policy, situation, target, newest)
        why += more
        if hold is not None:
            held.append(hold)
    cooldown = cooldown_hold(policy, situation, verdict.action)
    if cooldown is not None:
        held.append(cooldown)
    return replace(verdict, why=why, target=target, held_by=tuple(held))


# -- the decision ---------------------------------------------------------


def _decision(policy: ScalePolicy, situation: Situation, verdict: Verdict) -> ScaleDecision:
    current = situation.current
    wanted = current if verdict.target is None else verdict.target
    action, target, clock = ScaleAction.HOLD, current, situation.cooldown
    if verdict.action is ScaleAction.HOLD:
        reason = verdict.why
    elif verdict.held_by:
        reason = f"{verdict.why}; holding at {current}"
        if wanted != current:
            reason += f" instead of {verb(verdict.action)} to {wanted}"
        reason += ": " + "; ".join(hold.reason for hold in verdict.held_by)
    else:
        action, target = verdict.action, wanted
        clock = CooldownClock(last_change_at=situation.now, last_action=action)
        reason = f"{verdict.why}; {verb(action)} {current} -> {target}"
    return ScaleDecision(
        action=action,
        current_nodes=current,
        target_nodes=target,
        reason=reason,
        rule=verdict.rule,
        held_by=verdict.held_by,
        signals=situation.signals,
        thresholds=policy.thresholds(),
        decided_at=situation.now,
        deadline_at=situation.deadline_at,
        time_left_s=situation.time_left_s,
        projection=_projection(policy, situation, verdict, wanted),
        cooldown=clock,
        recommended_nodes=verdict.recommended,
        conditions=_conditions(policy, situation, verdict, action is not ScaleAction.HOLD),
        grid=situation.grid,
        preempted_by=shrink.by_job if (shrink := _obeyed(situation, verdict)) else None,
    )


def _obeyed(situation: Situation, verdict: Verdict) -> Any:
    """The shrink request a ``preempted`` verdict obeys, else None."""
    if verdict.rule is not DecisionRule.PREEMPTED or situation.grid is None:
        return None
    return situation.grid.shrink


def _conditions(
    policy: ScalePolicy, situation: Situation, verdict: Verdict, changed: bool
) -> tuple[ScaleCondition, ...]:
    """The decision's HPA-style conditions (:mod:`~elasticgrid_provider.core.policy.conditions`)."""
    current, wanted = situation.current, verdict.target
    up = verdict.action is ScaleAction.SCALE_UP
    grid_limit = None
    if situation.grid is not None and verdict.capacity_limit is not None:
        unfitted = verdict.recommended if verdict.recommended is not None else current
        grid_limit = (
            f"{situation.grid.shortfall(current, max(unfitted, current + 1))}, so at most "
            f"{max(verdict.capacity_limit, current)} nodes"
        )
    cooldown_until = None
    changed_at = situation.cooldown.last_change_at
    if changed_at is not None:
        cooldown_s = policy.cooldown_s if up else policy.effective_scale_down_cooldown_s
        cooldown_until = changed_at + cooldown_s
    conditions: tuple[ScaleCondition, ...] = (
        able_to_scale(
            changed=changed,
            verb="scale-up" if up else "scale-down",
            current=current,
            target=current if wanted is None else wanted,
            holds=[(hold.rule, hold.reason) for hold in verdict.held_by],
            cooldown_until=cooldown_until,
        ),
        scaling_active(
            rule=verdict.rule,
            why=verdict.why,
            samples=situation.signals.samples,
            measured=situation.load is not None or situation.work is not None,
        ),
        scaling_limited(
            current=current,
            recommended=verdict.recommended,
            unclamped=_unclamped(policy, situation, verdict),
            min_nodes=policy.min_nodes,
            max_nodes=policy.max_nodes,
            grid_limit=grid_limit,
        ),
    )
    load, numbers = situation.load, verdict.numbers
    if load is not None and "covering_nodes" in numbers:
        covered = demand_covered(
            numbers, basis=str(load.basis), current=current, capacity=load.capacity_per_s
        )
        conditions = (*conditions, covered)
    return conditions


def _unclamped(policy: ScalePolicy, situation: Situation, verdict: Verdict) -> int | None:
    """The size the policy would recommend without ``min_nodes`` and ``max_nodes``, asked
    only when the recommendation sits on a bound (None otherwise, or with no policy run)."""
    recommended = verdict.recommended
    if verdict.rule is DecisionRule.PREEMPTED and situation.grid and situation.grid.shrink:
        return situation.grid.shrink.to_nodes
    if verdict.rule in (DecisionRule.MIN_SAMPLES, DecisionRule.BOUNDS) or recommended is None:
        return None
    if recommended not in (policy.min_nodes, policy.max_nodes):
        return None
    ceiling = max(policy.max_nodes, situation.current) * UNBOUNDED_FACTOR
    free = replace(policy, min_nodes=1, max_nodes=ceiling)
    return _recommend(free, situation).recommended


def _projection(
    policy: ScalePolicy, situation: Situation, verdict: Verdict, wanted: int
) -> dict[str, Any] | None:
    """The numbers behind the decision: demand, capacity, finish times, restart price."""
    if verdict.rule is DecisionRule.MIN_SAMPLES:
        return None
    current = situation.current
    numbers: dict[str, Any] = {}
    if situation.load is not None:
        numbers.update(situation.load.model_dump())
        loss, source = situation.memory.scaling(situation.load.basis, policy.scaling_loss)
        # the unit of demand and capacity: ``basis`` names the remaining work's once a
        # deadline projects a finish, which may be another
        numbers.update(scaling_loss=loss, scaling_source=source, demand_basis=situation.load.basis)
    numbers.update(verdict.numbers)
    restart = 0.0 if wanted == current else restart_price_node_s(policy, current, wanted)
    numbers.update(
        current_nodes=current,
        target_nodes=wanted,
        startup_s=policy.startup_s,
        restart_cost_node_s=restart,
    )
    work, time_left = situation.work, situation.time_left_s
    if work is not None and time_left is not None:
        current_finish = finish_s(policy, situation, work, current)
        target_finish = current_finish
        if wanted != current:
            target_finish = finish_s(policy, situation, work, wanted) + policy.startup_s
        numbers.update(
            basis=work.basis,
            remaining=work.amount,
            current_finish_s=bounded_or_none(current_finish),
            target_finish_s=bounded_or_none(target_finish),
            time_left_s=time_left,
            meets_deadline=target_finish <= time_left,
        )
    return {name: bounded_or_none(value) for name, value in numbers.items()}
