"""Every rule and hold, one case each, through decide(): the outcome, the reason and
the record (core/policy/controller.py and calculator.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from elasticgrid_provider.core.policy.controller import decide
from elasticgrid_provider.core.policy.decision import (
    CooldownClock,
    ScaleDecision,
)
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.samples import (
    MetricsWindow,
)
from tests.core.policy.windows import (
    BALANCED_8,
    FAST_4,
    IDLE_8,
    LINEAR,
    PRIOR,
    QUEUED_8,
    RECENT_UP,
    T0,
    steady,
)


def case(
    case_id: str,
    window: MetricsWindow,
    outcome: tuple[str, int, str, tuple[str, ...]],
    *phrases: str,
    policy: dict[str, Any] | None = None,
    **inputs: Any,
) -> Any:
    """One table row: the window, the policy and decide() inputs, the expected outcome."""
    return pytest.param(policy or {}, window, inputs, outcome, phrases, id=case_id)


HOLD, UP, DOWN = "hold", "scale_up", "scale_down"
ROUND_MARGIN = {"deadline_margin": 0.1}  # the table's deadline sums use a round 10% margin


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
        policy={"min_samples": 5},
    ),
    # 2. bounds
    case(
        "below-floor",
        steady(1, queue=0.1),
        (UP, 2, "bounds", ()),
        "current size 1 is below the floor of 2; scaling up 1 -> 2",
        policy={"min_nodes": 2},
    ),
    case(
        "below-floor-explicit-current",
        BALANCED_8,
        (UP, 4, "bounds", ()),
        "current size 1 is below the floor of 4; scaling up 1 -> 4",
        policy={"min_nodes": 4},
        current_nodes=1,
    ),
    case(
        "below-floor-ignores-cooldown",
        steady(1, queue=0.1),
        (UP, 2, "bounds", ()),
        "current size 1 is below the floor of 2 (bounds corrections ignore the cooldown); "
        "scaling up 1 -> 2",
        policy={"min_nodes": 2},
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
        policy={"max_nodes": 16, "startup_s": 120.0},
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
        policy={"max_nodes": 16},
    ),
    case(
        "queue-fills-the-step-falls-back-to-the-factor",
        steady(3, queue=1.0),
        (UP, 4, "queue_bound", ()),
        "scaling up 3 -> 4",
        policy={"scale_up_factor": 1.1},
    ),
    case(
        "queue-bound-at-ceiling",
        steady(16, queue=0.8),
        (HOLD, 16, "queue_bound", ("ceiling",)),
        "80% of the step was spent waiting for a worker",
        "holding at 16: already at the node ceiling of 16",
        policy={"max_nodes": 16},
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
        policy={"cooldown_s": 0},
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
        policy={"startup_s": 120.0},
        deadline_at=T0 + 45,
    ),
    case(
        "queue-bound-startup-equals-time-left",
        QUEUED_8,
        (HOLD, 8, "queue_bound", ("deadline",)),
        "only 120s left before the deadline, no more than the 120s new nodes need to start",
        policy={"startup_s": 120.0},
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
        policy={"startup_s": 120.0},
        deadline_at=T0 + 3600,
    ),
    case(
        "queue-bound-held-by-everything",
        steady(16, queue=0.8),
        (HOLD, 16, "queue_bound", ("ceiling", "deadline", "cooldown")),
        "holding at 16: already at the node ceiling of 16; only 50s left before the deadline, "
        "less than the 60s new nodes need to start; in cooldown: last change 120s ago",
        policy={"max_nodes": 16, "startup_s": 60.0},
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
        policy={"startup_s": 60.0},
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
        policy={"startup_s": 60.0},
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
        policy={"startup_s": 60.0},
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
        policy={"max_nodes": 16, "startup_s": 60.0},
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
        policy={"max_nodes": 16},
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
        policy={"startup_s": 60.0},
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
        policy={"startup_s": 60.0},
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
        policy={"startup_s": 60.0},
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
        policy={"startup_s": 60.0},
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
        policy=PRIOR,
    ),
    case(
        "idle-at-step-threshold",
        steady(8, step_s=15.0),
        (DOWN, 5, "idle", ()),
        "the mean step of 15s is at most 50% of the 30s target and 0% of it was spent "
        "waiting for a worker",
        "scaling down 8 -> 5",
        policy=PRIOR,
    ),
    case(
        "idle-rounds-down-to-floor",
        steady(3, step_s=5.0),
        (DOWN, 2, "idle", ()),
        "scaling down 3 -> 2",
        policy={**PRIOR, "min_nodes": 2},
    ),
    case(
        "idle-rounds-down",
        steady(3, step_s=5.0),
        (DOWN, 2, "idle", ()),
        "the mean step of 5s is at most 50% of the 30s target and 0% of it was spent "
        "waiting for a worker",
        "scaling down 3 -> 2",
        policy=PRIOR,
    ),
    case(
        "idle-limited-by-scale-down-factor",
        steady(10, step_s=5.0),
        (DOWN, 7, "idle", ()),
        "scaling down 10 -> 7",
        policy={**PRIOR, "scale_down_factor": 0.7},
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
        policy={"min_nodes": 2},
        cooldown=RECENT_UP,
    ),
    case(
        "idle-in-cooldown",
        IDLE_8,
        (HOLD, 8, "idle", ("cooldown",)),
        "holding at 8 instead of scaling down to 4: in cooldown: last change 120s ago, "
        "scale-down cooldown is 300s",
        cooldown=RECENT_UP,
        policy=PRIOR,
    ),
    case(
        "idle-in-separate-scale-down-cooldown",
        IDLE_8,
        (HOLD, 8, "idle", ("cooldown",)),
        "in cooldown: last change 600s ago, scale-down cooldown is 900s",
        policy={**PRIOR, "cooldown_s": 300.0, "scale_down_cooldown_s": 900.0},
        cooldown=CooldownClock(T0 - 600, "scale_up"),
    ),
    case(
        "queue-bound-passes-the-shorter-scale-up-cooldown",
        QUEUED_8,
        (UP, 40, "queue_bound", ()),
        "80% of the step was spent waiting for a worker",
        "scaling up 8 -> 40",
        policy={"cooldown_s": 300.0, "scale_down_cooldown_s": 900.0},
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
        policy=PRIOR,
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
        policy=PRIOR,
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
        policy=PRIOR,
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
    policy_args: dict[str, Any], window: MetricsWindow, inputs: dict[str, Any]
) -> ScaleDecision:
    return decide(_policy(policy_args), window, now=T0, **inputs)


def _policy(policy_args: dict[str, Any]) -> ScalePolicy:
    return ScalePolicy(**{**LINEAR, **ROUND_MARGIN, **policy_args})


@pytest.mark.parametrize(("policy_args", "window", "inputs", "outcome", "phrases"), CASES)
def test_decision_table(
    policy_args: dict[str, Any],
    window: MetricsWindow,
    inputs: dict[str, Any],
    outcome: tuple[str, int, str, tuple[str, ...]],
    phrases: tuple[str, ...],
) -> None:
    decision = _decide(policy_args, window, inputs)
    held = tuple(hold.rule for hold in decision.held_by)
    assert (decision.action.value, decision.target_nodes, decision.rule, held) == outcome
    for phrase in phrases:
        assert phrase in decision.reason
    assert decision.decided_at == T0
    assert decision.signals == window.signals()
    assert decision.thresholds == _policy(policy_args).thresholds()


@pytest.mark.parametrize(("policy_args", "window", "inputs", "outcome", "phrases"), CASES)
def test_every_decision_round_trips_through_json(
    policy_args: dict[str, Any],
    window: MetricsWindow,
    inputs: dict[str, Any],
    outcome: object,
    phrases: object,
) -> None:
    decision = _decide(policy_args, window, inputs)
    assert ScaleDecision.model_validate_json(decision.model_dump_json()) == decision
    plain = json.loads(json.dumps(decision.model_dump()))
    assert plain["action"] == decision.action.value
    assert ScaleDecision.model_validate(plain) == decision


@pytest.mark.parametrize(("policy_args", "window", "inputs", "outcome", "phrases"), CASES)
def test_decisions_are_deterministic(
    policy_args: dict[str, Any],
    window: MetricsWindow,
    inputs: dict[str, Any],
    outcome: object,
    phrases: object,
) -> None:
    first = _decide(policy_args, window, inputs)
    replayed_window = MetricsWindow.model_validate(json.loads(json.dumps(window.model_dump())))
    replayed_args = json.loads(json.dumps(_policy(policy_args).model_dump()))
    assert _decide(policy_args, window, inputs) == first
    assert (
        _decide(replayed_args, replayed_window, inputs).model_dump_json() == first.model_dump_json()
    )
