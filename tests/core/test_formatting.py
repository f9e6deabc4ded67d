"""The shared renderings: every rule names its thresholds; unbounded numbers read as words."""

from __future__ import annotations

import sys

from elasticgrid_provider.core.formatting import (
    RULE_THRESHOLDS,
    bounded_or_none,
    clock_text,
    held_text,
    iso_time,
    number_text,
    rule_text,
    seconds_text,
)
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.policy.rules import DecisionRule, HoldRule


def test_every_rule_the_scheduler_can_name_has_its_thresholds():
    parameters = ScalePolicy().thresholds()
    for rule in (*DecisionRule, *HoldRule):
        if rule is HoldRule.CAPACITY:  # the grid's capacity, no parameter of the policy
            assert rule not in RULE_THRESHOLDS
            continue
        assert RULE_THRESHOLDS.get(rule), rule
        unknown = set(RULE_THRESHOLDS[rule]) - set(parameters)
        assert not unknown, (rule, unknown)


def test_the_new_rules_show_the_parameters_they_compare_against():
    limits = ScalePolicy(startup_s=60).thresholds()
    assert rule_text("restart_cost", limits) == (
        "restart_cost (startup_s=60, resize_margin=1, horizon_s=3600)"
    )
    assert rule_text("demand", limits) == (
        "demand (headroom=0.2, tolerance=0.1, drain_s=1800, stream_band=0.05, peak_window_s=120)"
    )
    assert rule_text("deadline_pressure", limits) == (
        "deadline_pressure (deadline_margin=0.07, startup_s=60)"
    )
    assert rule_text("final_stretch", limits) == "final_stretch (final_stretch_s=240)"


def test_the_float_maximum_stands_for_unbounded():
    assert bounded_or_none(sys.float_info.max) is None
    assert bounded_or_none(float("inf")) is None
    assert bounded_or_none(1e300) == 1e300
    assert number_text(sys.float_info.max) == "unbounded"
    assert seconds_text(sys.float_info.max) == "never"
    assert seconds_text(None) == "-"
    assert seconds_text(90.0) == "90s"
    assert iso_time(sys.float_info.max) is None
    assert clock_text(sys.float_info.max) == "-"
    assert clock_text(1_767_225_600.0) == "2026-01-01T00:00:00Z"


def test_a_hold_by_the_shared_grid_reads_as_its_capacity_not_max_nodes():
    record = {
        "current_nodes": 4,
        "thresholds": ScalePolicy(max_nodes=8).thresholds(),
        "held_by": [{"rule": "capacity", "reason": "the shared grid has no free node for it"}],
        "grid": {"job": "a", "max_nodes": 4, "holders": {"b": {"local": 4}}},
    }
    assert held_text(record) == "grid capacity (0 free; 'b' holds 4 on local)"
    assert held_text({**record, "grid": None}) == "grid capacity"
