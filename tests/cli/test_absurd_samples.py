"""``elasticgrid simulate`` on absurd samples: every field is bounded, times are screened.

The sensor's side of the same rules: ``tests/sensors/test_state_faults.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.cli_support import T0, assert_one_line_error, run, run_json, sample, write_jsonl


def _stream(count: int = 8) -> list[dict]:
    """Queue-bound steps ending a second apart from T0 on 8 nodes."""
    return [sample(step, 40.0, 30.0, time=T0 + step, tokens=1000) for step in range(count)]


@pytest.mark.parametrize(
    ("field", "value", "complaint"),
    [
        ("time", 1e300, "sample time must be epoch seconds before 2100"),
        ("time", 1.767e18, "(milliseconds or nanoseconds?)"),
        ("duration_s", 1e308, "sample duration_s must be at most 604800, got 1e+308"),
        ("queue_s", 1e308, "sample queue_s must be at most 604800, got 1e+308"),
    ],
)
@pytest.mark.parametrize("timeline", [False, True])
def test_an_absurd_value_is_one_line_never_an_overflow(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    field: str,
    value: float,
    complaint: str,
    timeline: bool,
) -> None:
    samples = _stream()
    samples[3][field] = value
    path = write_jsonl(tmp_path / "s.jsonl", samples)
    code, out, err = run(capsys, "simulate", "--samples", path, *(["--timeline"] * timeline))
    assert_one_line_error(code, out, err, f"{path} line 4: ", complaint)
    assert "Overflow" not in err and "inf" not in err.replace("info", "")


def test_times_far_from_the_simulated_clock_are_left_out_with_a_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    samples = _stream()
    samples[2]["time"] = T0 + 3600.0  # an hour ahead of the others
    samples[5]["time"] = 4.0  # 1970: a clock counting from boot
    path = write_jsonl(tmp_path / "s.jsonl", samples)
    code, data = run_json(capsys, "simulate", "--samples", path)
    assert code == 0
    assert [line.split(":")[0] for line in data["left_out"]] == [
        "Left out step 2",
        "Left out step 5",
    ]
    assert "3593s after the check's clock" in data["left_out"][0]
    assert data["window"]["samples"] == 6  # the two never entered the window
    code, out, err = run(capsys, "simulate", "--samples", path)
    assert code == 0 and err == ""
    assert out.startswith("Left out step 2: its time ")
    assert "inf%" not in out

    code, data = run_json(capsys, "simulate", "--samples", path, "--timeline")
    assert code == 0
    assert len(data["left_out"]) == 2
    assert [entry["step"] for entry in data["timeline"]] == [0, 1, 3, 4, 6, 7]
    assert max(entry["time"] for entry in data["timeline"]) == T0 + 7


def test_one_decision_at_now_screens_the_samples_against_now(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_jsonl(tmp_path / "s.jsonl", _stream())
    # --now an hour before every sample: none has ended yet by that clock
    code, out, err = run(capsys, "simulate", "--samples", path, "--now", str(T0 - 3600.0))
    assert_one_line_error(
        code, out, err, "holds no sample near the simulated clock (Left out step 0: "
    )
