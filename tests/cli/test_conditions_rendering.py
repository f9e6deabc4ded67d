"""The CLI prints the conditions a decision recorded, and never derives them."""

from __future__ import annotations

from elasticgrid_provider.cli.rendering import decision_lines
from elasticgrid_provider.core.policy.controller import decide
from elasticgrid_provider.core.policy.decision import ScaleDecision
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.samples import MetricsWindow, StepSample

T0 = 1_700_000_000.0
QUEUED = MetricsWindow(samples=tuple(StepSample(step, 20.0, 16.0, 8) for step in range(3)))


def test_the_recorded_conditions_are_printed_as_stored():
    decision = decide(ScalePolicy(max_nodes=8), QUEUED, now=T0)
    lines = decision_lines(decision)
    for condition in decision.conditions:
        row = next(line for line in lines if line.lstrip().startswith(condition.type))
        assert f"{condition.status} ({condition.reason}): {condition.message}" in row
    limited = next(c for c in decision.conditions if c.type == "ScalingLimited")
    assert (limited.status, limited.reason) == (True, "TooManyNodes")


def test_a_decision_recorded_before_the_conditions_says_so():
    stored = decide(ScalePolicy(), QUEUED, now=T0).model_dump()
    del stored["conditions"]
    old = ScaleDecision.model_validate(stored)
    assert old.conditions == ()
    lines = decision_lines(old)
    assert any("not recorded" in line and "conditions" in line for line in lines)
    assert not any("AbleToScale" in line for line in lines)
