"""``simulate``'s policy flags come from the fields of ScalePolicy: one flag per parameter,
its help from the field, and the value lands in the decision's thresholds."""

from __future__ import annotations

from pathlib import Path

import pytest

from elasticgrid_provider.cli.parsing import POLICY_FLAGS
from elasticgrid_provider.core.policy.parameters import (
    PARAMETER_DEFAULTS,
    POLICY_PARAMETERS,
    parameter_about,
)
from tests.cli.cli_support import assert_one_line_error, queue_bound, run, run_json, write_jsonl


def test_every_parameter_has_one_flag_with_the_field_help(capsys):
    assert tuple(POLICY_FLAGS) == POLICY_PARAMETERS
    assert POLICY_FLAGS["cooldown_s"] == "--cooldown"
    assert POLICY_FLAGS["scale_down_window_s"] == "--scale-down-window"
    assert POLICY_FLAGS["startup_s"] == "--startup-s"
    code, out, _ = run(capsys, "simulate", "--help")
    assert code == 0
    help_text = " ".join(out.split())  # argparse wraps the help
    for name, flag in POLICY_FLAGS.items():
        assert f"{flag} X" in help_text, flag
        assert " ".join(parameter_about(name).help.split()) in help_text, name
    assert f"(default {PARAMETER_DEFAULTS['drain_s']:g})" in help_text


@pytest.mark.parametrize("name", POLICY_PARAMETERS)
def test_each_flag_sets_its_parameter(capsys, tmp_path: Path, name: str):
    path = write_jsonl(tmp_path / "samples.jsonl", queue_bound(4))
    value = {"min_nodes": 1, "max_nodes": 64, "min_samples": 3, "scale_up_factor": 3}.get(name, 0.3)
    code, data = run_json(capsys, "simulate", "--samples", path, POLICY_FLAGS[name], str(value))
    assert code == 0
    assert data["decision"]["thresholds"][name] == value


def test_a_bad_flag_value_names_the_flag(capsys, tmp_path: Path):
    path = write_jsonl(tmp_path / "samples.jsonl", queue_bound(4))
    code, out, err = run(capsys, "simulate", "--samples", path, "--scale-down-window", "-1")
    assert_one_line_error(code, out, err, "--scale-down-window must be at least 0, got -1.0")
