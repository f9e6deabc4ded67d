"""The decision record and the cooldown clock: checked on construction and from JSON
(core/policy/decision.py)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

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
from tests.core.policy.windows import QUEUED_8, T0


def test_cooldown_clock_round_trip_and_validation() -> None:
    clock = CooldownClock(T0, ScaleAction.SCALE_DOWN)
    assert clock.last_action == "scale_down"
    assert clock.model_dump() == {"last_change_at": T0, "last_action": "scale_down"}
    assert CooldownClock.model_validate(json.loads(json.dumps(clock.model_dump()))) == clock
    assert CooldownClock.model_validate({}) == NO_COOLDOWN == CooldownClock()
    assert clock.seconds_since_change(T0 + 5) == 5
    assert NO_COOLDOWN.seconds_since_change(T0) is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"last_change_at": math.nan}, "cooldown last_change_at must be a finite number, got nan"),
        ({"last_change_at": "yesterday"}, "cooldown last_change_at must be a number"),
        ({"last_change_at": True}, "cooldown last_change_at must be a number, got True"),
        ({"last_action": "hold"}, "cooldown last_action must be one of 'scale_up', 'scale_down'"),
        ([], "cooldown must be a JSON object"),
    ],
)
def test_bad_cooldown_clock_is_rejected(data: object, message: str) -> None:
    with pytest.raises(ElasticGridError) as caught:
        CooldownClock.model_validate(data)
    assert str(caught.value).startswith(message)


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
    ],
)
def test_inconsistent_decision_records_are_rejected(changes: dict[str, Any], message: str) -> None:
    data = decide(ScalePolicy(), QUEUED_8, now=T0).model_dump()
    data.update(current_nodes=8, target_nodes=16, action="scale_up")
    data.update(changes)
    with pytest.raises(ElasticGridError) as caught:
        ScaleDecision.model_validate(data)
    assert str(caught.value).startswith(message)


def test_missing_decision_field_is_named() -> None:
    data = decide(ScalePolicy(), QUEUED_8, now=T0).model_dump()
    del data["rule"]
    with pytest.raises(ElasticGridError, match="decision is missing the field 'rule'"):
        ScaleDecision.model_validate(data)
    with pytest.raises(ElasticGridError, match="decision is not valid JSON"):
        ScaleDecision.model_validate_json("{")


def test_a_scale_change_cannot_be_held_back() -> None:
    decision = decide(ScalePolicy(), QUEUED_8, now=T0)
    data = decision.model_dump()
    data["held_by"] = [HeldBy("cooldown", "in cooldown").model_dump()]
    with pytest.raises(ElasticGridError, match="cannot be held back"):
        ScaleDecision.model_validate(data)
