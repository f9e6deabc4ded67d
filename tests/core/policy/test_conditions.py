"""The HPA-style conditions the policy records with each decision (core/policy/conditions.py)."""

from __future__ import annotations

from typing import Any

from elasticgrid_provider.core.policy import controller
from elasticgrid_provider.core.policy.decision import CooldownClock, ScaleDecision
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.samples import MetricsWindow, StepSample

T0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z


def window(
    nodes: int, *, step_s: float = 20.0, queue: float = 0.0, count: int = 3
) -> MetricsWindow:
    """``count`` identical steps on ``nodes`` nodes, ``queue`` of each step spent waiting."""
    return MetricsWindow(
        samples=tuple(StepSample(step, step_s, queue * step_s, nodes) for step in range(count))
    )


def conditions(decision: ScaleDecision) -> dict[str, tuple[bool, str, str]]:
    return {c.type: (c.status, c.reason, c.message) for c in decision.conditions}


def decide(scheduler: dict[str, Any], samples: MetricsWindow, **inputs: Any) -> ScaleDecision:
    return controller.decide(
        ScalePolicy(**{"scaling_loss": 0.0, **scheduler}), samples, now=T0, **inputs
    )


def test_a_scale_up_within_the_bounds_is_not_limited():
    # the defect: 2 -> 4 read "ScalingLimited True: limited by floor (min_nodes=2)"
    decision = decide({"min_nodes": 2, "max_nodes": 8}, window(2, queue=0.5))
    assert (decision.action.value, decision.target_nodes) == ("scale_up", 4)
    found = conditions(decision)
    assert found["ScalingLimited"] == (
        False,
        "DesiredWithinRange",
        "the recommended 4 nodes are within the bounds (min_nodes=2, max_nodes=8)",
    )
    assert found["AbleToScale"][:2] == (True, "SucceededRescale")
    assert found["ScalingActive"] == (
        True,
        "ValidMetricFound",
        "the size is computed from 3 samples by the queue_bound rule",
    )


def test_a_recommendation_clamped_to_the_ceiling_is_limited():
    # 4 nodes wait 80% of the step: 20 nodes would remove the wait, the ceiling is 8
    decision = decide({"max_nodes": 8}, window(4, queue=0.8))
    assert (decision.action.value, decision.target_nodes) == ("scale_up", 8)
    status, reason, message = conditions(decision)["ScalingLimited"]
    assert (status, reason) == (True, "TooManyNodes")
    assert message == "the policy wants 20 nodes, clamped to the ceiling max_nodes=8"
    # at the ceiling already, the change is held by it: still able to scale, but limited
    held = decide({"max_nodes": 4}, window(4, queue=0.8))
    assert [hold.rule for hold in held.held_by] == ["ceiling"]
    found = conditions(held)
    assert found["ScalingLimited"][:2] == (True, "TooManyNodes")
    assert found["AbleToScale"][:2] == (True, "ReadyForNewScale")


def test_an_idle_job_at_its_floor_is_limited_by_the_floor():
    decision = decide({"min_nodes": 4, "max_nodes": 8}, window(4, step_s=5.0))
    assert decision.action.value == "hold"
    status, reason, message = conditions(decision)["ScalingLimited"]
    assert (status, reason) == (True, "TooFewNodes")
    assert message.endswith("clamped to the floor min_nodes=4")
    # a bigger job at the same load wants 4 nodes, within the bounds: not limited
    free = decide({"min_nodes": 1, "max_nodes": 16}, window(8, step_s=5.0))
    assert free.recommended_nodes == 4
    assert conditions(free)["ScalingLimited"][0] is False


def test_a_job_outside_its_bounds_is_limited_by_the_bound_it_is_moved_to():
    below = decide({"min_nodes": 4, "max_nodes": 8}, window(2))
    assert (below.rule, below.target_nodes) == ("bounds", 4)
    assert conditions(below)["ScalingLimited"][:2] == (True, "TooFewNodes")
    above = decide({"min_nodes": 1, "max_nodes": 8}, window(10))
    assert conditions(above)["ScalingLimited"][:2] == (True, "TooManyNodes")


def test_a_cooldown_says_until_when_and_which_way():
    clock = CooldownClock(T0 - 120, "scale_up")
    decision = decide({"cooldown_s": 600}, window(2, queue=0.5), cooldown=clock)
    assert [hold.rule for hold in decision.held_by] == ["cooldown"]
    status, reason, message = conditions(decision)["AbleToScale"]
    assert (status, reason) == (False, "BackoffUp")
    # the change at T0 - 120 plus 600 s: 2023-11-14T22:21:20Z
    assert message.startswith("held by cooldown until 2023-11-14T22:21:20Z: in cooldown")
    assert conditions(decision)["ScalingLimited"][0] is False


def test_too_few_samples_is_scaling_inactive():
    decision = decide({}, window(2, count=1))
    found = conditions(decision)
    assert found["ScalingActive"] == (
        False,
        "NotEnoughSamples",
        "not enough samples to decide: 1 of 3",
    )
    assert found["ScalingLimited"][:2] == (False, "DesiredWithinRange")


def test_the_conditions_round_trip_and_replay_identically():
    decision = decide({"max_nodes": 8}, window(4, queue=0.8))
    again = ScaleDecision.model_validate_json(decision.model_dump_json())
    assert again.conditions == decision.conditions
    assert [c["type"] for c in decision.model_dump()["conditions"]] == [
        "AbleToScale",
        "ScalingActive",
        "ScalingLimited",
    ]
    # a record from before the conditions still loads
    data = decision.model_dump()
    del data["conditions"]
    assert ScaleDecision.model_validate(data).conditions == ()
