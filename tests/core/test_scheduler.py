"""The scale decision: every rule and every held-back path (SPEC 4.2, 4.6.3-4.6.6)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.policy.controller import decide
from elasticgrid_provider.core.policy.decision import (
    NO_COOLDOWN,
    CooldownClock,
    HeldBy,
    ScaleDecision,
)
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.policy.rules import ScaleAction
from elasticgrid_provider.core.samples import (
    LATEST_TIME,
    MAX_NODES,
    MAX_STEP,
    MAX_STEP_S,
    MAX_TOKENS,
    MIN_STEP_S,
    MIN_TOKENS,
    MetricsWindow,
    StepSample,
)

T0 = 1_700_000_000.0
"""A realistic ``now`` (epoch seconds); 0.1.0 defaulted ``now`` to 0 (defect 4.6.5)."""


def steady(
    nodes: int, *, step_s: float = 20.0, queue: float = 0.0, count: int = 3, tokens: float = 0.0
) -> MetricsWindow:
    """``count`` identical samples on ``nodes`` nodes; ``queue`` is the queued share of the step."""
    return MetricsWindow(
        samples=tuple(
            StepSample(step, step_s, queue * step_s, nodes, tokens) for step in range(count)
        )
    )


QUEUED_8 = steady(8, queue=0.8)  # 80% queued: queue-bound
BALANCED_8 = steady(8, queue=0.1)  # 20 s steps, 10% queued: neither busy nor idle
IDLE_8 = steady(8, step_s=5.0)  # 5 s steps, nothing queued: idle
FAST_4 = steady(4, step_s=2.0)  # 2 s steps on 4 nodes: used for deadline projections
RECENT_UP = CooldownClock(T0 - 120, "scale_up")
LINEAR = {"scaling_loss": 0.0}
PRIOR = {"scaling_loss": 0.1}
"""Idle shrinks pay only through a smaller size's better per-node throughput: the prior's."""
"""The table assumes linear scaling unless a case says otherwise, so sizes are hand-computable."""


def case(
    case_id: str,
    window: MetricsWindow,
    outcome: tuple[str, int, str, tuple[str, ...]],
    *phrases: str,
    scheduler: dict[str, Any] | None = None,
    **inputs: Any,
) -> Any:
    """One table row: the window, the scheduler and decide() inputs, the expected outcome."""
    return pytest.param(scheduler or {}, window, inputs, outcome, phrases, id=case_id)


HOLD, UP, DOWN = "hold", "scale_up", "scale_down"

CASES = [
    # 1. min_samples
    case(
        "min-samples",
        steady(8, queue=0.8, count=2),
        (HOLD, 8, "min_samples", ()),
        "not enough samples to decide: 2 of 3",
    ),
    case(
        "min-samples-before-bounds",
        steady(8, count=1),
        (HOLD, 2000, "min_samples", ()),
        "not enough samples to decide: 1 of 3",
        current_nodes=2000,
    ),
    case(
        "empty-window-unknown-size",
        MetricsWindow(),
        (HOLD, 0, "min_samples", ()),
        "not enough samples to decide: 0 of 3; the current size is unknown until a sample arrives",
    ),
    case(
        "min-samples-configurable",
        steady(8, queue=0.8, count=4),
        (HOLD, 8, "min_samples", ()),
        "not enough samples to decide: 4 of 5",
        scheduler={"min_samples": 5},
    ),
    # 2. bounds
    case(
        "below-floor",
        steady(1, queue=0.1),
        (UP, 2, "bounds", ()),
        "current size 1 is below the floor of 2; scaling up 1 -> 2",
        scheduler={"min_nodes": 2},
    ),
    case(
        "below-floor-explicit-current",
        BALANCED_8,
        (UP, 4, "bounds", ()),
        "current size 1 is below the floor of 4; scaling up 1 -> 4",
        scheduler={"min_nodes": 4},
        current_nodes=1,
    ),
    case(
        "below-floor-ignores-cooldown",
        steady(1, queue=0.1),
        (UP, 2, "bounds", ()),
        "current size 1 is below the floor of 2 (bounds corrections ignore the cooldown); "
        "scaling up 1 -> 2",
        scheduler={"min_nodes": 2},
        cooldown=RECENT_UP,
    ),
    case(
        "above-ceiling-is-a-scale-down",
        QUEUED_8,
        (DOWN, 1024, "bounds", ()),
        "current size 2000 is above the ceiling of 1024; scaling down 2000 -> 1024",
        current_nodes=2000,
    ),
    case(
        "above-ceiling-ignores-cooldown-and-deadline",
        QUEUED_8,
        (DOWN, 16, "bounds", ()),
        "current size 20 is above the ceiling of 16 (bounds corrections ignore the cooldown); "
        "scaling down 20 -> 16",
        scheduler={"max_nodes": 16, "startup_s": 120.0},
        current_nodes=20,
        cooldown=RECENT_UP,
        deadline_at=T0 + 10,
    ),
    # 3. queue_bound
    case(
        "queue-bound",
        QUEUED_8,
        (UP, 40, "queue_bound", ()),
        "80% of the step was spent waiting for a worker",
        "scaling up 8 -> 40",
    ),
    case(
        "queue-bound-at-threshold",
        steady(8, queue=0.2),
        (UP, 10, "queue_bound", ()),
        "20% of the step was spent waiting for a worker",
        "scaling up 8 -> 10",
    ),
    case(
        "queue-bound-clamped-to-ceiling",
        steady(12, queue=0.8),
        (UP, 16, "queue_bound", ()),
        "scaling up 12 -> 16",
        scheduler={"max_nodes": 16},
    ),
    case(
        "queue-fills-the-step-falls-back-to-the-factor",
        steady(3, queue=1.0),
        (UP, 4, "queue_bound", ()),
        "scaling up 3 -> 4",
        scheduler={"scale_up_factor": 1.1},
    ),
    case(
        "queue-bound-at-ceiling",
        steady(16, queue=0.8),
        (HOLD, 16, "queue_bound", ("ceiling",)),
        "80% of the step was spent waiting for a worker",
        "holding at 16: already at the node ceiling of 16",
        scheduler={"max_nodes": 16},
    ),
    case(
        "queue-bound-in-cooldown",
        QUEUED_8,
        (HOLD, 8, "queue_bound", ("cooldown",)),
        "80% of the step was spent waiting for a worker",
        "holding at 8 instead of scaling up to 40: in cooldown: last change 120s ago, "
        "scale-up cooldown is 300s",
        cooldown=RECENT_UP,
    ),
    case(
        "queue-bound-cooldown-just-over",
        QUEUED_8,
        (UP, 40, "queue_bound", ()),
        "80% of the step was spent waiting for a worker",
        "scaling up 8 -> 40",
        cooldown=CooldownClock(T0 - 300, "scale_down"),
    ),
    case(
        "queue-bound-cooldown-zero",
        QUEUED_8,
        (UP, 40, "queue_bound", ()),
        "80% of the step was spent waiting for a worker",
        "scaling up 8 -> 40",
        scheduler={"cooldown_s": 0},
        cooldown=CooldownClock(T0, "scale_up"),
    ),
    case(
        "queue-bound-change-recorded-in-the-future",
        QUEUED_8,
        (HOLD, 8, "queue_bound", ("cooldown",)),
        "in cooldown: last change is recorded 50s in the future, scale-up cooldown is 300s",
        cooldown=CooldownClock(T0 + 50, "scale_up"),
    ),
    case(
        "queue-bound-too-close-to-deadline-for-startup",
        QUEUED_8,
        (HOLD, 8, "queue_bound", ("deadline",)),
        "80% of the step was spent waiting for a worker",
        "holding at 8 instead of scaling up to 40: only 45s left before the deadline, "
        "less than the 120s new nodes need to start",
        scheduler={"startup_s": 120.0},
        deadline_at=T0 + 45,
    ),
    case(
        "queue-bound-startup-equals-time-left",
        QUEUED_8,
        (HOLD, 8, "queue_bound", ("deadline",)),
        "only 120s left before the deadline, no more than the 120s new nodes need to start",
        scheduler={"startup_s": 120.0},
        deadline_at=T0 + 120,
    ),
    case(
        "queue-bound-deadline-passed",
        QUEUED_8,
        (HOLD, 8, "queue_bound", ("deadline",)),
        "80% of the step was spent waiting for a worker",
        "holding at 8 instead of scaling up to 40: no time is left before the deadline",
        deadline_at=T0 - 10,
    ),
    case(
        "queue-bound-deadline-far-enough",
        QUEUED_8,
        (UP, 40, "queue_bound", ()),
        "80% of the step was spent waiting for a worker",
        "scaling up 8 -> 40",
        scheduler={"startup_s": 120.0},
        deadline_at=T0 + 3600,
    ),
    case(
        "queue-bound-held-by-everything",
        steady(16, queue=0.8),
        (HOLD, 16, "queue_bound", ("ceiling", "deadline", "cooldown")),
        "holding at 16: already at the node ceiling of 16; only 50s left before the deadline, "
        "less than the 60s new nodes need to start; in cooldown: last change 120s ago",
        scheduler={"max_nodes": 16, "startup_s": 60.0},
        deadline_at=T0 + 50,
        cooldown=RECENT_UP,
    ),
    # 3. deadline_pressure
    case(
        "deadline-pressure-steps",
        FAST_4,
        (UP, 7, "deadline_pressure", ()),
        "at 4 nodes the remaining 600 steps take 1200s and 900s are left (810s after the "
        "10% margin)",
        "scaling up 4 -> 7",
        scheduler={"startup_s": 60.0},
        deadline_at=T0 + 900,
        remaining_steps=600,
    ),
    case(
        "deadline-pressure-tokens",
        steady(4, step_s=2.0, tokens=1000.0),  # 500 tokens/s
        (UP, 7, "deadline_pressure", ()),
        "at 4 nodes the remaining 600000 tokens take 1200s and 900s are left (810s after "
        "the 10% margin)",
        "scaling up 4 -> 7",
        scheduler={"startup_s": 60.0},
        deadline_at=T0 + 900,
        remaining_tokens=600_000,
    ),
    case(
        "deadline-pressure-steps-win-over-tokens",
        steady(4, step_s=2.0, tokens=1000.0),
        (UP, 7, "deadline_pressure", ()),
        "at 4 nodes the remaining 600 steps take 1200s and 900s are left (810s after the "
        "10% margin)",
        "scaling up 4 -> 7",
        scheduler={"startup_s": 60.0},
        deadline_at=T0 + 900,
        remaining_steps=600,
        remaining_tokens=1.0,
    ),
    case(
        "deadline-pressure-exact-size",
        FAST_4,
        (UP, 7, "deadline_pressure", ()),
        "at 4 nodes the remaining 600 steps take 1200s and 800s are left (720s after the "
        "10% margin)",
        "scaling up 4 -> 7",
        deadline_at=T0 + 800,
        remaining_steps=600,
    ),
    case(
        "deadline-pressure-exact-size-despite-float-noise",
        steady(4, step_s=0.1),  # mean step 0.10000000000000002 s
        (UP, 7, "deadline_pressure", ()),
        "at 4 nodes the remaining 12000 steps take 1200s and 800s are left (720s after "
        "the 10% margin)",
        "scaling up 4 -> 7",
        deadline_at=T0 + 800,
        remaining_steps=12_000,
    ),
    case(
        "deadline-pressure-cannot-be-met",
        FAST_4,
        (UP, 16, "deadline_pressure", ()),
        "at 4 nodes the remaining 60000 steps take 120000s and 900s are left (810s after "
        "the 10% margin)",
        "scaling up 4 -> 16",
        scheduler={"max_nodes": 16, "startup_s": 60.0},
        deadline_at=T0 + 900,
        remaining_steps=60_000,
    ),
    case(
        "deadline-pressure-at-ceiling",
        steady(16, step_s=2.0),
        (HOLD, 16, "deadline_pressure", ("ceiling",)),
        "at 16 nodes the remaining 6000 steps take 12000s and 900s are left (810s after "
        "the 10% margin)",
        "holding at 16: already at the node ceiling of 16",
        scheduler={"max_nodes": 16},
        deadline_at=T0 + 900,
        remaining_steps=6000,
    ),
    case(
        "deadline-pressure-too-late-for-startup",
        FAST_4,
        (HOLD, 4, "deadline_pressure", ("deadline",)),
        "at 4 nodes the remaining 600 steps take 1200s and 45s are left (40.5s after the "
        "10% margin)",
        "holding at 4 instead of scaling up to 1024: only 45s left before the deadline, "
        "less than the 60s new nodes need to start",
        scheduler={"startup_s": 60.0},
        deadline_at=T0 + 45,
        remaining_steps=600,
    ),
    case(
        "deadline-pressure-after-the-deadline",
        FAST_4,
        (HOLD, 4, "deadline_pressure", ("deadline",)),
        "at 4 nodes the remaining 600 steps take 1200s and no time is left (0s after the "
        "10% margin)",
        "holding at 4 instead of scaling up to 1024: no time is left before the deadline",
        deadline_at=T0 - 5,
        remaining_steps=600,
    ),
    case(
        "deadline-pressure-in-cooldown",
        FAST_4,
        (HOLD, 4, "deadline_pressure", ("cooldown",)),
        "at 4 nodes the remaining 600 steps take 1200s and 900s are left (810s after the "
        "10% margin)",
        "holding at 4 instead of scaling up to 7: in cooldown: last change 120s ago, "
        "scale-up cooldown is 300s",
        scheduler={"startup_s": 60.0},
        deadline_at=T0 + 900,
        remaining_steps=600,
        cooldown=RECENT_UP,
    ),
    case(
        "queue-and-deadline-queue-target-larger",
        steady(4, step_s=2.0, queue=0.5),
        (UP, 7, "deadline_pressure", ()),
        "at 4 nodes the remaining 600 steps take 1200s and 900s are left (810s after the "
        "10% margin)",
        "scaling up 4 -> 7",
        scheduler={"startup_s": 60.0},
        deadline_at=T0 + 900,
        remaining_steps=600,
    ),
    case(
        "queue-and-deadline-deadline-target-larger",
        steady(4, step_s=2.0, queue=0.5),
        (UP, 13, "deadline_pressure", ()),
        "at 4 nodes the remaining 1200 steps take 2400s and 900s are left (810s after "
        "the 10% margin)",
        "scaling up 4 -> 13",
        scheduler={"startup_s": 60.0},
        deadline_at=T0 + 900,
        remaining_steps=1200,
    ),
    # 4. idle
    case(
        "idle",
        IDLE_8,
        (DOWN, 4, "idle", ()),
        "the mean step of 5s is at most 50% of the 30s target and 0% of it was spent "
        "waiting for a worker",
        "scaling down 8 -> 4",
        scheduler=PRIOR,
    ),
    case(
        "idle-at-step-threshold",
        steady(8, step_s=15.0),
        (DOWN, 5, "idle", ()),
        "the mean step of 15s is at most 50% of the 30s target and 0% of it was spent "
        "waiting for a worker",
        "scaling down 8 -> 5",
        scheduler=PRIOR,
    ),
    case(
        "idle-rounds-down-to-floor",
        steady(3, step_s=5.0),
        (DOWN, 2, "idle", ()),
        "scaling down 3 -> 2",
        scheduler={**PRIOR, "min_nodes": 2},
    ),
    case(
        "idle-rounds-down",
        steady(3, step_s=5.0),
        (DOWN, 2, "idle", ()),
        "the mean step of 5s is at most 50% of the 30s target and 0% of it was spent "
        "waiting for a worker",
        "scaling down 3 -> 2",
        scheduler=PRIOR,
    ),
    case(
        "idle-limited-by-scale-down-factor",
        steady(10, step_s=5.0),
        (DOWN, 7, "idle", ()),
        "scaling down 10 -> 7",
        scheduler={**PRIOR, "scale_down_factor": 0.7},
    ),
    case(
        "idle-at-floor",
        steady(1, step_s=5.0),
        (HOLD, 1, "idle", ("floor",)),
        "of it was spent waiting for a worker; holding at 1: already at the node floor of 1",
    ),
    case(
        "idle-at-floor-and-in-cooldown",
        steady(2, step_s=5.0),
        (HOLD, 2, "idle", ("floor", "cooldown")),
        "holding at 2: already at the node floor of 2; in cooldown: last change 120s ago, "
        "scale-down cooldown is 300s",
        scheduler={"min_nodes": 2},
        cooldown=RECENT_UP,
    ),
    case(
        "idle-in-cooldown",
        IDLE_8,
        (HOLD, 8, "idle", ("cooldown",)),
        "holding at 8 instead of scaling down to 4: in cooldown: last change 120s ago, "
        "scale-down cooldown is 300s",
        cooldown=RECENT_UP,
        scheduler=PRIOR,
    ),
    case(
        "idle-in-separate-scale-down-cooldown",
        IDLE_8,
        (HOLD, 8, "idle", ("cooldown",)),
        "in cooldown: last change 600s ago, scale-down cooldown is 900s",
        scheduler={**PRIOR, "cooldown_s": 300.0, "scale_down_cooldown_s": 900.0},
        cooldown=CooldownClock(T0 - 600, "scale_up"),
    ),
    case(
        "queue-bound-passes-the-shorter-scale-up-cooldown",
        QUEUED_8,
        (UP, 40, "queue_bound", ()),
        "80% of the step was spent waiting for a worker",
        "scaling up 8 -> 40",
        scheduler={"cooldown_s": 300.0, "scale_down_cooldown_s": 900.0},
        cooldown=CooldownClock(T0 - 600, "scale_up"),
    ),
    case(
        "idle-held-by-deadline",
        IDLE_8,
        (HOLD, 8, "deadline_slack", ("restart_cost",)),
        "at 8 nodes the remaining 100 steps take 500s and 800s are left (720s after the "
        "10% margin)",
        "holding at 8 instead of scaling down to 6: saving 171.15 node-seconds is within "
        "the 10% tolerance of the 4000 node-seconds left to pay",
        deadline_at=T0 + 800,
        remaining_steps=100,
        scheduler=PRIOR,
    ),
    case(
        "idle-smaller-size-still-meets-deadline",
        IDLE_8,
        (DOWN, 4, "deadline_slack", ()),
        "at 8 nodes the remaining 100 steps take 500s and 1200s are left (1080s after "
        "the 10% margin)",
        "scaling down 8 -> 4",
        deadline_at=T0 + 1200,
        remaining_steps=100,
        scheduler=PRIOR,
    ),
    case(
        "idle-no-work-left",
        FAST_4,
        (HOLD, 4, "balanced", ()),
        "no work is left (the remaining 0 steps)",
        "hold the current size",
        deadline_at=T0 - 5,
        remaining_steps=0,
    ),
    case(
        "idle-deadline-without-remaining-work",
        IDLE_8,
        (DOWN, 4, "idle", ()),
        "scaling down 8 -> 4",
        deadline_at=T0 + 10,
        scheduler=PRIOR,
    ),
    # 5. balanced
    case(
        "balanced",
        BALANCED_8,
        (HOLD, 8, "balanced", ()),
        "the step is balanced; hold the current size",
    ),
    case(
        "balanced-long-steps-without-queue",
        steady(8, step_s=40.0),
        (HOLD, 8, "balanced", ()),
        "the step is balanced",
    ),
    case(
        "balanced-short-steps-with-some-queue",
        steady(8, step_s=5.0, queue=0.06),
        (HOLD, 8, "balanced", ()),
        "the step is balanced",
    ),
    case(
        "balanced-deadline-met",
        BALANCED_8,
        (HOLD, 8, "deadline_slack", ("restart_cost",)),
        "at 8 nodes the remaining 100 steps take 2000s and 3600s are left (3240s after "
        "the 10% margin)",
        "holding at 8 instead of scaling down to 6: saving 0 node-seconds is within the "
        "10% tolerance of the 16000 node-seconds left to pay",
        deadline_at=T0 + 3600,
        remaining_steps=100,
    ),
    case(
        "balanced-zero-duration-steps",
        steady(8, step_s=0.0),
        (HOLD, 8, "balanced", ()),
        "the samples show no work to size from",
        "hold the current size",
    ),
]


def _decide(
    scheduler_args: dict[str, Any], window: MetricsWindow, inputs: dict[str, Any]
) -> ScaleDecision:
    return decide(ScalePolicy(**{**LINEAR, **scheduler_args}), window, now=T0, **inputs)


@pytest.mark.parametrize(("scheduler_args", "window", "inputs", "outcome", "phrases"), CASES)
def test_decision_table(
    scheduler_args: dict[str, Any],
    window: MetricsWindow,
    inputs: dict[str, Any],
    outcome: tuple[str, int, str, tuple[str, ...]],
    phrases: tuple[str, ...],
) -> None:
    decision = _decide(scheduler_args, window, inputs)
    held = tuple(hold.rule for hold in decision.held_by)
    assert (decision.action.value, decision.target_nodes, decision.rule, held) == outcome
    for phrase in phrases:
        assert phrase in decision.reason
    assert decision.decided_at == T0
    assert decision.signals == window.signals()
    assert decision.thresholds == ScalePolicy(**{**LINEAR, **scheduler_args}).thresholds()


@pytest.mark.parametrize(("scheduler_args", "window", "inputs", "outcome", "phrases"), CASES)
def test_every_decision_round_trips_through_json(
    scheduler_args: dict[str, Any],
    window: MetricsWindow,
    inputs: dict[str, Any],
    outcome: object,
    phrases: object,
) -> None:
    decision = _decide(scheduler_args, window, inputs)
    assert ScaleDecision.from_json(decision.to_json()) == decision
    plain = json.loads(json.dumps(decision.to_dict()))
    assert plain["action"] == decision.action.value
    assert ScaleDecision.from_dict(plain) == decision


@pytest.mark.parametrize(("scheduler_args", "window", "inputs", "outcome", "phrases"), CASES)
def test_decisions_are_deterministic(
    scheduler_args: dict[str, Any],
    window: MetricsWindow,
    inputs: dict[str, Any],
    outcome: object,
    phrases: object,
) -> None:
    first = _decide(scheduler_args, window, inputs)
    replayed_window = MetricsWindow.from_dict(json.loads(json.dumps(window.to_dict())))
    replayed_args = json.loads(json.dumps(ScalePolicy(**{**LINEAR, **scheduler_args}).to_dict()))
    assert _decide(scheduler_args, window, inputs) == first
    assert _decide(replayed_args, replayed_window, inputs).to_json() == first.to_json()


# -- the cooldown clock is explicit state (defect 4.6.5) -------------------------


def test_a_change_starts_the_cooldown_and_a_hold_keeps_the_clock() -> None:
    scheduler = ScalePolicy()
    change = decide(scheduler, QUEUED_8, now=T0, cooldown=RECENT_UP)
    assert change.action is ScaleAction.HOLD
    assert change.cooldown is RECENT_UP
    change = decide(scheduler, QUEUED_8, now=T0)
    assert change.cooldown == CooldownClock(last_change_at=T0, last_action="scale_up")
    down = decide(scheduler, IDLE_8, now=T0 + 1)
    assert down.cooldown == CooldownClock(T0 + 1, "scale_down")
    bounds = decide(scheduler, QUEUED_8, now=T0 + 2, current_nodes=2000)
    assert bounds.cooldown == CooldownClock(T0 + 2, "scale_down")
    balanced = decide(scheduler, BALANCED_8, now=T0 + 3, cooldown=bounds.cooldown)
    assert balanced.cooldown == bounds.cooldown


def test_two_decisions_in_a_row_leave_the_cooldown_after_cooldown_s() -> None:
    """0.1.0 kept the clock in memory and defaulted ``now`` to 0: it never left cooldown."""
    scheduler = ScalePolicy(cooldown_s=300.0, max_nodes=64, **LINEAR)
    first = decide(scheduler, QUEUED_8, now=T0)
    assert (first.action, first.target_nodes) == (ScaleAction.SCALE_UP, 40)

    # A new process reads the stored clock back, as a scheduled check would.
    stored = json.loads(json.dumps(first.cooldown.to_dict()))
    fresh_scheduler = ScalePolicy.from_dict(json.loads(json.dumps(scheduler.to_dict())))
    busy_16 = steady(16, queue=0.8)
    second = decide(fresh_scheduler, busy_16, now=T0 + 60, cooldown=CooldownClock.from_dict(stored))
    assert second.action is ScaleAction.HOLD
    assert [hold.rule for hold in second.held_by] == ["cooldown"]
    assert "last change 60s ago, scale-up cooldown is 300s" in second.reason
    assert second.cooldown == first.cooldown

    third = decide(fresh_scheduler, busy_16, now=T0 + 300, cooldown=second.cooldown)
    assert (third.action, third.target_nodes) == (ScaleAction.SCALE_UP, 64)  # 80, at the ceiling
    assert third.cooldown == CooldownClock(T0 + 300, "scale_up")


def test_separate_scale_down_cooldown_holds_down_but_not_up() -> None:
    scheduler = ScalePolicy(cooldown_s=300.0, scale_down_cooldown_s=900.0, max_nodes=16)
    assert scheduler.effective_scale_down_cooldown_s == 900.0
    clock = CooldownClock(T0 - 600, "scale_up")
    down = decide(scheduler, IDLE_8, now=T0, cooldown=clock)
    up = decide(scheduler, QUEUED_8, now=T0, cooldown=clock)
    assert (down.action, down.held_by[0].rule) == (ScaleAction.HOLD, "cooldown")
    assert (up.action, up.target_nodes) == (ScaleAction.SCALE_UP, 16)
    later = decide(scheduler, IDLE_8, now=T0 + 300, cooldown=clock)
    assert (later.action, later.target_nodes) == (ScaleAction.SCALE_DOWN, 4)


def test_scale_down_cooldown_defaults_to_cooldown_s() -> None:
    scheduler = ScalePolicy(cooldown_s=120.0)
    assert scheduler.scale_down_cooldown_s is None
    assert scheduler.effective_scale_down_cooldown_s == 120.0
    assert scheduler.thresholds()["scale_down_cooldown_s"] == 120.0
    assert scheduler.to_dict()["scale_down_cooldown_s"] is None


def test_cooldown_clock_round_trip_and_validation() -> None:
    clock = CooldownClock(T0, ScaleAction.SCALE_DOWN)
    assert clock.last_action == "scale_down"
    assert clock.to_dict() == {"last_change_at": T0, "last_action": "scale_down"}
    assert CooldownClock.from_dict(json.loads(json.dumps(clock.to_dict()))) == clock
    assert CooldownClock.from_dict({}) == NO_COOLDOWN == CooldownClock()
    assert clock.seconds_since_change(T0 + 5) == 5
    assert NO_COOLDOWN.seconds_since_change(T0) is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"last_change_at": math.nan}, "cooldown last_change_at must be a finite number, got nan"),
        ({"last_change_at": "yesterday"}, "cooldown last_change_at must be a number"),
        ({"last_change_at": True}, "cooldown last_change_at must be a number, got True"),
        ({"last_action": "hold"}, "cooldown last_action must be one of 'scale_up', 'scale_down'"),
        ({"since": 1}, "cooldown has an unknown field 'since'"),
        ([], "cooldown must be a JSON object"),
    ],
)
def test_bad_cooldown_clock_is_rejected(data: object, message: str) -> None:
    with pytest.raises(ElasticGridError) as caught:
        CooldownClock.from_dict(data)
    assert str(caught.value).startswith(message)


# -- parameters and inputs are validated (defect 4.6.6) ---------------------------


@pytest.mark.parametrize(
    ("parameter", "value", "message"),
    [
        ("min_nodes", 0, "min_nodes must be at least 1, got 0"),
        ("min_nodes", True, "min_nodes must be a number, got True"),
        ("min_nodes", 1.5, "min_nodes must be a whole number, got 1.5"),
        ("min_nodes", math.nan, "min_nodes must be a finite number, got nan"),
        ("max_nodes", math.inf, "max_nodes must be a finite number, got inf"),
        ("max_nodes", 0, "max_nodes must be at least 1, got 0"),
        ("max_nodes", "64", "max_nodes must be a number, got '64'"),
        ("scale_up_factor", 1.0, "scale_up_factor must be greater than 1, got 1.0"),
        ("scale_up_factor", math.nan, "scale_up_factor must be a finite number, got nan"),
        ("scale_up_factor", -2.0, "scale_up_factor must be greater than 1, got -2.0"),
        ("scale_down_factor", 0.0, "scale_down_factor must be greater than 0, got 0.0"),
        ("scale_down_factor", 1.0, "scale_down_factor must be less than 1, got 1.0"),
        ("scale_down_factor", math.inf, "scale_down_factor must be a finite number, got inf"),
        ("cooldown_s", -1.0, "cooldown_s must be at least 0, got -1.0"),
        ("cooldown_s", math.inf, "cooldown_s must be a finite number, got inf"),
        ("cooldown_s", False, "cooldown_s must be a number, got False"),
        ("scale_down_cooldown_s", -5, "scale_down_cooldown_s must be at least 0, got -5"),
        ("scale_down_cooldown_s", math.nan, "scale_down_cooldown_s must be a finite number"),
        ("target_queue_fraction", 1.5, "target_queue_fraction must be at most 1, got 1.5"),
        ("target_queue_fraction", -0.1, "target_queue_fraction must be at least 0, got -0.1"),
        ("idle_queue_fraction", math.nan, "idle_queue_fraction must be a finite number, got nan"),
        ("idle_step_fraction", 0.0, "idle_step_fraction must be greater than 0, got 0.0"),
        ("target_step_s", 0, "target_step_s must be greater than 0, got 0"),
        ("target_step_s", -math.inf, "target_step_s must be a finite number, got -inf"),
        ("min_samples", 0, "min_samples must be at least 1, got 0"),
        ("min_samples", 2.5, "min_samples must be a whole number, got 2.5"),
        ("startup_s", -1.0, "startup_s must be at least 0, got -1.0"),
        ("startup_s", math.inf, "startup_s must be a finite number, got inf"),
    ],
)
def test_bad_parameters_are_rejected_naming_the_parameter(
    parameter: str, value: Any, message: str
) -> None:
    with pytest.raises(ElasticGridError) as caught:
        ScalePolicy(**{parameter: value})
    assert str(caught.value).startswith(message)


def test_max_nodes_below_min_nodes_is_rejected() -> None:
    with pytest.raises(ElasticGridError, match="max_nodes must be at least 8, got 4"):
        ScalePolicy(min_nodes=8, max_nodes=4)


def test_parameters_are_normalised_and_round_trip() -> None:
    scheduler = ScalePolicy(min_nodes=2.0, max_nodes=64, cooldown_s=60, startup_s=90)  # type: ignore[arg-type]
    assert type(scheduler.min_nodes) is int and type(scheduler.cooldown_s) is float
    assert ScalePolicy.from_dict(json.loads(json.dumps(scheduler.to_dict()))) == scheduler
    assert ScalePolicy.from_dict({}) == ScalePolicy()
    assert set(scheduler.thresholds()) == set(scheduler.to_dict())
    with pytest.raises(ElasticGridError, match="scheduler has an unknown field 'deadline_s'"):
        ScalePolicy.from_dict({"deadline_s": 10})


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"now": math.nan}, "now must be a finite number, got nan"),
        ({"now": None}, "now must be a number, got None"),
        ({"now": True}, "now must be a number, got True"),
        ({"deadline_at": math.inf}, "deadline_at must be a finite number, got inf"),
        ({"deadline_at": "tomorrow"}, "deadline_at must be a number, got 'tomorrow'"),
        ({"remaining_steps": -1}, "remaining_steps must be at least 0, got -1"),
        ({"remaining_steps": math.nan}, "remaining_steps must be a finite number, got nan"),
        ({"remaining_tokens": math.inf}, "remaining_tokens must be a finite number, got inf"),
        ({"current_nodes": 0}, "current_nodes must be at least 1, got 0"),
        ({"current_nodes": True}, "current_nodes must be a number, got True"),
        ({"current_nodes": 2.5}, "current_nodes must be a whole number, got 2.5"),
        ({"cooldown": {"last_change_at": 1.0}}, "cooldown must be a CooldownClock"),
    ],
)
def test_bad_decide_inputs_are_rejected(inputs: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {"now": T0, **inputs}
    with pytest.raises(ElasticGridError) as caught:
        decide(ScalePolicy(), QUEUED_8, **arguments)
    assert str(caught.value).startswith(message)


def test_decide_requires_a_window_and_an_explicit_now() -> None:
    with pytest.raises(ElasticGridError, match="window must be a MetricsWindow"):
        decide(ScalePolicy(), [StepSample(1, 1.0)], now=T0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        decide(ScalePolicy(), QUEUED_8)  # type: ignore[call-arg]


def test_nan_samples_never_reach_the_decision() -> None:
    """0.1.0 answered "balanced" for NaN durations (defect 4.6.6)."""
    with pytest.raises(ElasticGridError, match="sample duration_s must be a finite number"):
        QUEUED_8.add(StepSample(9, math.nan))
    with pytest.raises(
        ElasticGridError, match=r"window samples\.0\.queue_s must be a finite number"
    ):
        MetricsWindow.from_dict({"samples": [{"step": 1, "duration_s": 1.0, "queue_s": math.inf}]})


def test_remaining_work_too_large_to_project_is_rejected() -> None:
    with pytest.raises(ElasticGridError, match=r"remaining_steps .* is too large to project"):
        decide(
            ScalePolicy(),
            steady(4, step_s=MAX_STEP_S),
            now=T0,
            deadline_at=T0 + 10,
            remaining_steps=1e308,
        )


# -- the decision record ----------------------------------------------------------


def test_decision_record_carries_the_projection() -> None:
    decision = decide(
        ScalePolicy(startup_s=60.0, **LINEAR),
        FAST_4,
        now=T0,
        deadline_at=T0 + 900,
        remaining_steps=600,
    )
    assert decision.deadline_at == T0 + 900
    assert decision.time_left_s == 900.0
    projection = decision.projection
    assert projection is not None
    # 0.125 steps per node-second: 600 steps take 4800/n s; 7 is the smallest size with
    # 60 + 4800/7 = 745.7 <= 0.9 * 900
    assert {name: projection[name] for name in _PROJECTED} == {
        "basis": "steps",
        "remaining": 600.0,
        "current_nodes": 4,
        "current_finish_s": 1200.0,
        "time_left_s": 900.0,
        "startup_s": 60.0,
        "target_nodes": 7,
        "target_finish_s": pytest.approx(60.0 + 4800.0 / 7),
        "meets_deadline": True,
        "restart_cost_node_s": 7 * 60.0,
        "capacity_per_s": 0.5,
        "demand_per_s": 0.5,
        "loop": "closed",
        "scaling_loss": 0.0,
    }
    assert decision.changed and decision.recommended_nodes == 7
    plain = decision.to_dict()
    assert plain["held_by"] == [] and plain["cooldown"]["last_change_at"] == T0
    no_deadline = decide(ScalePolicy(), FAST_4, now=T0, remaining_steps=600)
    assert no_deadline.time_left_s is None
    assert no_deadline.projection is not None and "meets_deadline" not in no_deadline.projection


_PROJECTED = (
    "basis",
    "remaining",
    "current_nodes",
    "current_finish_s",
    "time_left_s",
    "startup_s",
    "target_nodes",
    "target_finish_s",
    "meets_deadline",
    "restart_cost_node_s",
    "capacity_per_s",
    "demand_per_s",
    "loop",
    "scaling_loss",
)


def test_held_decision_lists_its_holds_in_the_record() -> None:
    decision = decide(ScalePolicy(), QUEUED_8, now=T0, cooldown=RECENT_UP)
    assert decision.to_dict()["held_by"] == [
        {
            "rule": "cooldown",
            "reason": "in cooldown: last change 120s ago, scale-up cooldown is 300s",
        }
    ]
    assert not decision.changed


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"action": "scale_up", "target_nodes": 8}, "decision action scale_up does not fit"),
        ({"action": "scale_down", "target_nodes": 9}, "decision action scale_down does not fit"),
        ({"action": "hold", "target_nodes": 9}, "decision action hold does not fit"),
        ({"action": "grow"}, "decision action must be one of 'scale_up', 'scale_down', 'hold'"),
        ({"rule": "vibes"}, "decision rule must be one of"),
        ({"reason": ""}, "decision reason must not be empty"),
        ({"held_by": [{"rule": "mood", "reason": "x"}]}, "decision held_by.0.rule must be one of"),
        ({"thresholds": {"min_nodes": 0}}, "min_nodes must be at least 1, got 0"),
        ({"decided_at": math.nan}, "decision decided_at must be a finite number"),
        ({"signals": {"samples": -1}}, "decision signals.samples must be at least 0, got -1"),
        ({"extra": 1}, "decision has an unknown field 'extra'"),
    ],
)
def test_inconsistent_decision_records_are_rejected(changes: dict[str, Any], message: str) -> None:
    data = decide(ScalePolicy(), QUEUED_8, now=T0).to_dict()
    data.update(current_nodes=8, target_nodes=16, action="scale_up")
    data.update(changes)
    with pytest.raises(ElasticGridError) as caught:
        ScaleDecision.from_dict(data)
    assert str(caught.value).startswith(message)


def test_missing_decision_field_is_named() -> None:
    data = decide(ScalePolicy(), QUEUED_8, now=T0).to_dict()
    del data["rule"]
    with pytest.raises(ElasticGridError, match="decision is missing the field 'rule'"):
        ScaleDecision.from_dict(data)
    with pytest.raises(ElasticGridError, match="decision is not valid JSON"):
        ScaleDecision.from_json("{")


def test_a_scale_change_cannot_be_held_back() -> None:
    decision = decide(ScalePolicy(), QUEUED_8, now=T0)
    data = decision.to_dict()
    data["held_by"] = [HeldBy("cooldown", "in cooldown").to_dict()]
    with pytest.raises(ElasticGridError, match="cannot be held back"):
        ScaleDecision.from_dict(data)


# -- properties -----------------------------------------------------------------

seconds = st.one_of(st.just(0.0), st.floats(1e-3, 60.0), st.floats(60.0, 1e4))


@st.composite
def schedulers(draw: st.DrawFn) -> ScalePolicy:
    min_nodes = draw(st.integers(1, 64))
    return ScalePolicy(
        min_nodes=min_nodes,
        max_nodes=draw(st.integers(min_nodes, 2048)),
        scale_up_factor=draw(st.floats(1.001, 8.0)),
        scale_down_factor=draw(st.floats(0.01, 0.99)),
        cooldown_s=draw(st.floats(0, 1000)),
        scale_down_cooldown_s=draw(st.none() | st.floats(0, 2000)),
        target_queue_fraction=draw(st.floats(0, 1) | st.floats(0.1, 0.5)),
        idle_queue_fraction=draw(st.floats(0, 1) | st.floats(0, 0.1)),
        idle_step_fraction=draw(st.floats(0.01, 2.0)),
        target_step_s=draw(st.floats(0.1, 100.0)),
        min_samples=draw(st.integers(1, 5)),
        startup_s=draw(st.floats(0, 600)),
    )


@st.composite
def mixed_windows(draw: st.DrawFn, sizes: st.SearchStrategy[int]) -> MetricsWindow:
    """Up to 8 unrelated samples: any mix of sizes, step times, queueing and tokens."""
    count = draw(st.integers(0, 8))
    sample = st.builds(
        StepSample,
        step=st.integers(0, 10**6),
        duration_s=seconds,
        queue_s=st.one_of(st.just(0.0), seconds),
        nodes=sizes,
        tokens=st.one_of(st.just(0.0), st.floats(1.0, 1e6)),
    )
    samples = draw(st.lists(sample, min_size=count, max_size=count))
    return MetricsWindow(size=8, samples=tuple(samples))


@st.composite
def steady_windows(draw: st.DrawFn, sizes: st.SearchStrategy[int]) -> MetricsWindow:
    """Identical samples: reaches the idle and queue-bound rules far more often."""
    return steady(
        draw(sizes),
        step_s=draw(seconds),
        queue=draw(st.just(0.0) | st.floats(0, 1)),
        count=draw(st.integers(1, 8) | st.just(8)),
        tokens=draw(st.just(0.0) | st.floats(1.0, 1e6)),
    )


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[ScalePolicy, MetricsWindow, dict[str, Any]]:
    """A scheduler, a window and decide() inputs; sizes mostly within the bounds."""
    scheduler = draw(schedulers())
    out_of_bounds = draw(st.integers(0, 9)) == 0
    sizes = (
        st.integers(1, 4096)
        if out_of_bounds
        else st.integers(scheduler.min_nodes, scheduler.max_nodes)
    )
    window = draw(st.one_of(mixed_windows(sizes), steady_windows(sizes)))
    now = draw(st.floats(1e9, 2e9))
    last_change_ago = draw(st.none() | st.floats(-100, 3000))
    deadline_in = draw(st.none() | st.floats(-1000, 1e5))
    inputs = {
        "now": now,
        "current_nodes": draw(st.none() | sizes),
        "cooldown": NO_COOLDOWN
        if last_change_ago is None
        else CooldownClock(
            now - last_change_ago, draw(st.sampled_from(["scale_up", "scale_down"]))
        ),
        "deadline_at": None if deadline_in is None else now + deadline_in,
        "remaining_steps": draw(st.none() | st.floats(0, 1e5)),
        "remaining_tokens": draw(st.none() | st.floats(0, 1e8)),
    }
    return scheduler, window, inputs


@settings(max_examples=500, deadline=None)
@given(scenario=scenarios())
def test_decision_invariants(
    scenario: tuple[ScalePolicy, MetricsWindow, dict[str, Any]],
) -> None:
    scheduler, window, inputs = scenario
    decision = decide(scheduler, window, **inputs)
    current, target = decision.current_nodes, decision.target_nodes
    if decision.action is ScaleAction.SCALE_UP:
        assert target > current
    elif decision.action is ScaleAction.SCALE_DOWN:
        assert target < current
    else:
        assert target == current
    # Always within the bounds, except a min_samples hold at a size it cannot judge yet.
    if decision.rule != "min_samples":
        assert scheduler.min_nodes <= target <= scheduler.max_nodes
    if scheduler.min_nodes <= current <= scheduler.max_nodes:
        assert scheduler.min_nodes <= target <= scheduler.max_nodes
    if decision.held_by:
        assert decision.action is ScaleAction.HOLD
    if decision.changed:
        assert decision.cooldown == CooldownClock(inputs["now"], decision.action.value)
    else:
        assert decision.cooldown == inputs["cooldown"]
    assert ScaleDecision.from_json(decision.to_json()) == decision
    assert decide(scheduler, window, **inputs) == decision


def test_an_unbounded_demand_is_recorded_as_none_not_the_float_maximum():
    # the queue fills every step: the closed-loop demand has no bound
    window = MetricsWindow(samples=tuple(StepSample(i, 10.0, 10.0, 4) for i in range(4)))
    decision = decide(
        ScalePolicy(max_nodes=8, min_samples=3),
        window,
        now=1e9,
        deadline_at=1e9 + 600,
        remaining_steps=100,
    )
    projection = decision.projection or {}
    assert projection["demand_per_s"] is None
    assert projection["utilisation"] is None
    assert projection["current_finish_s"] == 1000.0
    text = json.dumps(decision.to_dict(), allow_nan=False)
    assert "e+308" not in text


def _extreme(low: float, high: float) -> st.SearchStrategy[float]:
    """A bound itself, or anything between: the corners are where arithmetic overflows."""
    return st.sampled_from([low, high]) | st.floats(low, high)


extreme_samples = st.builds(
    StepSample,
    step=st.integers(0, MAX_STEP),
    duration_s=st.just(0.0) | _extreme(MIN_STEP_S, MAX_STEP_S),
    queue_s=_extreme(0.0, MAX_STEP_S),
    nodes=st.sampled_from([1, MAX_NODES]) | st.integers(1, MAX_NODES),
    tokens=st.just(0.0) | _extreme(MIN_TOKENS, MAX_TOKENS),
    time=st.none() | _extreme(0.0, LATEST_TIME),
)


@settings(max_examples=400, deadline=None)
@given(samples=st.lists(extreme_samples, max_size=12), now=_extreme(0.0, LATEST_TIME))
def test_every_sample_within_the_bounds_is_decided_on_without_an_arithmetic_error(
    samples: list[StepSample], now: float
) -> None:
    # every sample field is bounded so that no decision can overflow: 1e300 step times and
    # 1e308 durations raised OverflowError in _arrival_spread before the bounds existed
    window = MetricsWindow(size=12, samples=tuple(samples))
    current = samples[-1].nodes if samples else 1
    scheduler = ScalePolicy(min_samples=1, max_nodes=MAX_NODES)
    for deadline in (None, now + 3600.0):
        try:
            decision = decide(
                scheduler,
                window,
                now=now,
                current_nodes=current,
                deadline_at=deadline,
                remaining_steps=1e4,
            )
        except ElasticGridError as error:  # a clear sentence is fine, never an arithmetic error
            assert "too large" in str(error), error
            continue
        assert 1 <= decision.target_nodes <= MAX_NODES
        assert ScaleDecision.from_json(decision.to_json()) == decision
