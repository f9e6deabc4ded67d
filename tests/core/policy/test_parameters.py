"""ScalePolicy: its parameters checked, normalised and round-tripped
(core/policy/parameters.py)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.policy.parameters import ScalePolicy


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
    assert ScalePolicy.model_validate(json.loads(json.dumps(scheduler.model_dump()))) == scheduler
    assert ScalePolicy.model_validate({}) == ScalePolicy()
    assert set(scheduler.thresholds()) == set(scheduler.model_dump())
    with pytest.raises(ElasticGridError, match="policy has an unknown field 'deadline_s'"):
        ScalePolicy.model_validate({"deadline_s": 10})
