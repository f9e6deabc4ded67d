"""``elasticgrid simulate``: one decision, a timeline, and replays of recorded decisions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from elasticgrid_provider.cli import REPLAY_FIELDS
from elasticgrid_provider.core.formatting import decision_summary
from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.policy.decision import NO_COOLDOWN, ScaleDecision
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.providers import Provider
from elasticgrid_provider.core.recovery import LostPart, RecoveryPolicy, decide_recovery
from elasticgrid_provider.core.samples import MetricsWindow, StepSample
from elasticgrid_provider.core.state import (
    DecisionInputs,
    DecisionRecord,
    ScaleState,
    remember_recovery,
)
from tests.cli.cli_support import (
    QUEUE_BOUND_EXAMPLE,
    T0,
    assert_one_line_error,
    queue_bound,
    run,
    run_json,
    sample,
    write_jsonl,
)

# -- simulate -------------------------------------------------------------------------


def test_simulate_queue_bound_example_scales_up(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "simulate", "--samples", str(QUEUE_BOUND_EXAMPLE))
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "window kept 10 of 12 samples (--window-size 10)"
    # 75.1% of the step waited for a worker: 8 / (1 - 0.751) = 32.1, so 33 workers remove it
    assert "decision: scale_up 8 -> 33" in lines
    assert "(saturated, stalled)" in out
    # the conditions the policy recorded, rendered as they are
    assert "  AbleToScale     True (SucceededRescale): the scale-up 8 -> 33 is made now" in out
    assert "  ScalingLimited  False (DesiredWithinRange): the recommended 33 nodes" in out
    code, data = run_json(capsys, "simulate", "--samples", str(QUEUE_BOUND_EXAMPLE))
    assert code == 0
    assert set(data) == {"window", "decision"}  # 0.1.0's keys
    window, decision = data["window"], data["decision"]
    assert (window["size"], window["kept"], window["total"], window["dropped"]) == (10, 10, 12, 2)
    assert window["samples"] == 10 and window["nodes"] == 8 and window["stalled"] is True
    assert (decision["action"], decision["current_nodes"], decision["target_nodes"]) == (
        "scale_up",
        8,
        33,
    )
    assert decision["rule"] == "queue_bound"
    # the newest sample's `time` field is the decision time
    assert decision["decided_at"] == 1767226089.0
    assert ScaleDecision.model_validate(decision).target_nodes == 33
    assert decision["projection"]["loop"] == "closed"  # each step starts when the last ended


def test_simulate_json_list_and_json_lines_agree(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    entries = queue_bound(5)
    listed = tmp_path / "samples.json"
    listed.write_text(json.dumps(entries, indent=2))
    lines = tmp_path / "samples.jsonl"
    lines.write_text("\n" + "\n\n".join(json.dumps(entry) for entry in entries) + "\n\n")
    _, from_list = run_json(capsys, "simulate", "--samples", str(listed))
    _, from_lines = run_json(capsys, "simulate", "--samples", str(lines))
    assert from_list == from_lines
    assert from_list["decision"]["action"] == "scale_up"
    # without `time` fields the clock is the sum of the durations
    assert from_list["decision"]["decided_at"] == 200.0


def test_simulate_window_size(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "s.jsonl", queue_bound(25))
    code, out, _ = run(capsys, "simulate", "--samples", path)
    assert code == 0
    assert out.splitlines()[0] == "window kept 10 of 25 samples (--window-size 10)"
    code, out, _ = run(capsys, "simulate", "--samples", path, "--window-size", "30")
    assert out.splitlines()[0] == "window kept all 25 samples (--window-size 30)"
    _, data = run_json(capsys, "simulate", "--samples", path, "--window-size", "4")
    assert (data["window"]["kept"], data["window"]["total"], data["window"]["size"]) == (4, 25, 4)


def test_simulate_says_how_many_samples_were_at_another_size(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "s.jsonl", queue_bound(5, nodes=8))
    code, out, _ = run(capsys, "simulate", "--samples", path, "--nodes", "4")
    assert code == 0
    assert out.splitlines()[0] == (
        "window kept 0 of 5 samples (--window-size 10); 5 left out for being measured "
        "at another size than --nodes 4"
    )
    _, data = run_json(capsys, "simulate", "--samples", path, "--nodes", "4")
    assert (data["window"]["kept"], data["window"]["other_size"]) == (0, 5)
    # at the samples' own size nothing is left out, and nothing is said
    code, out, _ = run(capsys, "simulate", "--samples", path, "--nodes", "8")
    assert out.splitlines()[0] == "window kept all 5 samples (--window-size 10)"


def test_simulate_scheduler_options(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "s.jsonl", queue_bound(5))
    _, data = run_json(
        capsys, "simulate", "--samples", path, "--startup-s", "600", "--horizon-s", "900"
    )
    # 32 nodes save 900 * (1 - 8/32) = 675 s of the horizon, less than twice a 600 s restart
    assert (data["decision"]["action"], data["decision"]["target_nodes"]) == ("hold", 8)
    assert [h["rule"] for h in data["decision"]["held_by"]] == ["restart_cost"]
    assert data["decision"]["thresholds"]["horizon_s"] == 900.0
    _, data = run_json(capsys, "simulate", "--samples", path, "--target-queue-fraction", "0.9")
    assert (data["decision"]["action"], data["decision"]["rule"]) == ("hold", "balanced")
    _, data = run_json(capsys, "simulate", "--samples", path, "--max-nodes", "8")
    assert data["decision"]["action"] == "hold"
    assert [h["rule"] for h in data["decision"]["held_by"]] == ["ceiling"]
    _, data = run_json(capsys, "simulate", "--samples", path, "--min-samples", "6")
    assert data["decision"]["rule"] == "min_samples"
    # like the sensor, the window keeps only samples measured at the current size
    _, data = run_json(capsys, "simulate", "--samples", path, "--nodes", "4")
    assert (data["decision"]["current_nodes"], data["decision"]["rule"]) == (4, "min_samples")
    at_2000 = write_jsonl(tmp_path / "big.jsonl", queue_bound(5, nodes=2000))
    _, data = run_json(capsys, "simulate", "--samples", at_2000)
    assert (data["decision"]["action"], data["decision"]["rule"]) == ("scale_down", "bounds")
    thresholds = run_json(
        capsys,
        "simulate",
        "--samples",
        path,
        "--min-nodes",
        "2",
        "--cooldown",
        "60",
        "--scale-down-cooldown",
        "900",
        "--scale-down-factor",
        "0.25",
        "--idle-queue-fraction",
        "0.01",
        "--idle-step-fraction",
        "0.4",
        "--target-step-s",
        "20",
        "--startup-s",
        "30",
        "--horizon-s",
        "7200",
        "--resize-margin",
        "0.5",
        "--headroom",
        "0.3",
        "--tolerance",
        "0.05",
        "--drain-s",
        "600",
        "--scale-down-window",
        "1200",
        "--deadline-margin",
        "0.2",
        "--scaling-loss",
        "0.2",
    )[1]["decision"]["thresholds"]
    assert thresholds == {
        **ScalePolicy().thresholds(),
        "min_nodes": 2,
        "cooldown_s": 60.0,
        "scale_down_cooldown_s": 900.0,
        "scale_down_factor": 0.25,
        "idle_queue_fraction": 0.01,
        "idle_step_fraction": 0.4,
        "target_step_s": 20.0,
        "startup_s": 30.0,
        "final_stretch_s": 120.0,  # four restarts
        "horizon_s": 7200.0,
        "resize_margin": 0.5,
        "headroom": 0.3,
        "tolerance": 0.05,
        "drain_s": 600.0,
        "scale_down_window_s": 1200.0,
        "deadline_margin": 0.2,
        "scaling_loss": 0.2,
    }


def test_simulate_idle_scales_down(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "idle.jsonl", [sample(step, 5.0, 0.0, 8) for step in range(4)])
    code, out, _ = run(capsys, "simulate", "--samples", path)
    assert code == 0
    assert "decision: scale_down 8 -> 4" in out


def test_simulate_deadline(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Balanced steps, but 1000 more steps of 20 s on 8 nodes cannot finish in 10000 s."""
    path = write_jsonl(tmp_path / "s.jsonl", [sample(step, 20.0, 2.0, 8) for step in range(4)])
    args = ("simulate", "--samples", path, "--now", str(T0), "--deadline-in", "10000")
    code, data = run_json(capsys, *args, "--remaining-steps", "1000")
    assert code == 0
    decision = data["decision"]
    assert decision["decided_at"] == T0 and decision["deadline_at"] == T0 + 10000
    # 8 * 20000 / (0.93 * 10000) = 17.2 nodes at linear scaling; the prior's 10% loss per
    # doubling makes it 20
    assert (decision["action"], decision["rule"], decision["target_nodes"]) == (
        "scale_up",
        "deadline_pressure",
        20,
    )
    assert decision["projection"]["current_finish_s"] == 20000.0
    code, out, _ = run(capsys, *args, "--remaining-steps", "1000")
    assert "deadline        2026-01-01T02:46:40Z (1767235600.0), 10000s left" in out
    assert "projection      1000 steps take 20000s on 8 nodes" in out


def test_simulate_timeline_carries_the_cooldown(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    entries = queue_bound(3) + queue_bound(4, nodes=32, step_s=10.0)  # 4x the nodes, 1/4 the step
    path = write_jsonl(tmp_path / "s.jsonl", entries)
    code, data = run_json(capsys, "simulate", "--samples", path, "--timeline")
    assert code == 0
    assert set(data) == {"timeline", "window"}
    timeline = data["timeline"]
    assert [entry["sample"] for entry in timeline] == list(range(1, 8))
    actions = [
        (e["decision"]["action"], e["decision"]["current_nodes"], e["decision"]["target_nodes"])
        for e in timeline
    ]
    assert actions[:3] == [("hold", 8, 8), ("hold", 8, 8), ("scale_up", 8, 32)]
    # the job now runs at 32: a fresh window, and the cooldown carried from the change
    assert [e["window_samples"] for e in timeline] == [1, 2, 3, 1, 2, 3, 4]
    assert [e["decision"]["rule"] for e in timeline[3:5]] == ["min_samples"] * 2
    for entry in timeline[5:]:
        assert entry["decision"]["action"] == "hold"
        assert [h["rule"] for h in entry["decision"]["held_by"]] == ["cooldown"]
        assert entry["decision"]["cooldown"]["last_change_at"] == timeline[2]["time"]
    code, out, _ = run(capsys, "simulate", "--samples", path, "--timeline")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "window kept 4 of 7 samples (--window-size 10)"
    assert lines[2].split()[:8] == [
        "#",
        "step",
        "time",
        "window",
        "action",
        "nodes",
        "rule",
        "held",
    ]
    rows = lines[3:10]
    assert rows[2].split()[:8] == ["3", "3", "120", "3", "scale_up", "8", "->", "32"]
    assert "in cooldown: last change 30s ago" in rows[5]  # sample 6 ends at 150 s
    assert lines[-1] == "7 decisions, 1 scale change; final size 32"


def test_simulate_timeline_keeps_the_sensors_window(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Issue 8: 3 queue-bound samples at 8 nodes, then 3 balanced at 16, holds at 16."""
    balanced = [sample(step, 40.0, 4.0, 16, tokens=1000) for step in range(4, 7)]
    path = write_jsonl(tmp_path / "s.jsonl", queue_bound(3) + balanced)
    _, data = run_json(capsys, "simulate", "--samples", path, "--timeline", "--cooldown", "0")
    decisions = [e["decision"] for e in data["timeline"]]
    assert [(d["action"], d["current_nodes"], d["target_nodes"]) for d in decisions][3:] == [
        ("hold", 16, 16)
    ] * 3
    assert decisions[-1]["rule"] == "balanced"
    assert [e["window_samples"] for e in data["timeline"]] == [1, 2, 3, 1, 2, 3]


def test_simulate_timeline_clock_without_time_fields(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "s.jsonl", queue_bound(6, step_s=100.0))
    _, data = run_json(
        capsys, "simulate", "--samples", path, "--timeline", "--now", "1000", "--cooldown", "250"
    )
    timeline = data["timeline"]
    assert [e["time"] for e in timeline] == [1100.0, 1200.0, 1300.0, 1400.0, 1500.0, 1600.0]
    assert [e["decision"]["action"] for e in timeline] == [
        "hold",
        "hold",
        "scale_up",
        "hold",
        "hold",
        "hold",
    ]
    # after the change the samples still say 8 nodes: not the job's size, so not in the window
    assert [e["decision"]["target_nodes"] for e in timeline] == [8, 8, 32, 32, 32, 32]
    assert [e["window_samples"] for e in timeline] == [1, 2, 3, 0, 0, 0]


def test_simulate_timeline_follows_resizes_in_the_samples(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    entries = queue_bound(3) + queue_bound(3, nodes=12)
    path = write_jsonl(tmp_path / "s.jsonl", entries)
    _, data = run_json(capsys, "simulate", "--samples", path, "--timeline", "--cooldown", "0")
    sizes = [
        (e["decision"]["current_nodes"], e["decision"]["target_nodes"]) for e in data["timeline"]
    ]
    # scale to 32 after sample 3; sample 4 reports 12 nodes: the job is 12 from then on, with
    # a fresh window
    assert sizes == [(8, 8), (8, 8), (8, 32), (12, 12), (12, 12), (12, 48)]


def test_simulate_timeline_deadline_and_remaining_work(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "s.jsonl", [sample(step, 10.0, 1.0, 4) for step in range(5)])
    _, data = run_json(
        capsys,
        "simulate",
        "--samples",
        path,
        "--timeline",
        "--deadline-in",
        "100",
        "--remaining-steps",
        "5",
        "--min-samples",
        "1",
    )
    timeline = data["timeline"]
    # one deadline for all: 100 s after the newest sample (time 50)
    assert {e["decision"]["deadline_at"] for e in timeline} == {150.0}
    # work after sample i: 5 after the newest, plus the samples still to come
    assert [e["decision"]["projection"]["remaining"] for e in timeline] == [9, 8, 7, 6, 5]


def test_simulate_total_steps_counts_the_steps_left_as_the_sensor_does(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "s.jsonl", [sample(step, 10.0, 1.0, 4) for step in range(5)])
    common = ("simulate", "--samples", path, "--deadline-in", "100", "--min-samples", "1")
    # one decision: steps 0..4 are done, so 20 of 25 are left
    _, total = run_json(capsys, *common, "--total-steps", "25")
    _, given = run_json(capsys, *common, "--remaining-steps", "20")
    assert total["decision"]["projection"]["remaining"] == 20
    assert total["decision"] == given["decision"]
    # a timeline: each decision counts from the newest step its window holds; after the
    # scale-up the old size's samples leave the window empty, and the work left is unknown
    _, data = run_json(capsys, *common, "--timeline", "--total-steps", "25")
    counted = [
        (e["window_samples"], (e["decision"].get("projection") or {}).get("remaining"))
        for e in data["timeline"]
    ]
    assert counted[0] == (1, 24)
    assert data["timeline"][0]["decision"]["action"] == "scale_up"
    assert counted[1:] == [(0, None)] * 4
    code, _, err = run(capsys, *common, "--total-steps", "25", "--remaining-steps", "20")
    assert code == 2
    assert "remaining_steps 20 and total_steps 25 are both set; give one" in err


# -- simulate --state: replay ---------------------------------------------------------


def recorded_state() -> ScaleState:
    """A job's state with two real decisions: a scale-up, then a hold in cooldown."""
    scheduler = ScalePolicy(cooldown_s=600)
    window = MetricsWindow(samples=tuple(StepSample(i, 40.0, 30.0, 8, 1000) for i in range(4)))
    state = ScaleState("demo", window=window, current_nodes=8)
    first = DecisionInputs(scheduler, window, T0, 8, NO_COOLDOWN)
    state = state.remember(DecisionRecord(first.decide(), first, {"job": "demo"}), T0)
    second = DecisionInputs(scheduler, window, T0 + 60, 16, state.cooldown)
    return state.remember(DecisionRecord(second.decide(), second, {"job": "demo"}), T0 + 60)


@pytest.mark.parametrize("form", ["bare", "exported", "exported-string"])
def test_simulate_state_replays_the_newest_decision(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, form: str
) -> None:
    state = recorded_state().model_dump()
    document: Any = {
        "bare": state,
        "exported": {"elasticgrid_scale_state__demo": state},
        "exported-string": {"elasticgrid_scale_state__demo": json.dumps(state)},
    }[form]
    path = tmp_path / "state.json"
    path.write_text(json.dumps(document))
    code, out, err = run(capsys, "simulate", "--state", str(path))
    assert (code, err) == (0, "")
    assert out.startswith("job demo: history entry 1 of 2 (0 = the oldest)")
    # recorded and replayed read as the sensor's log line: rule and holds with their thresholds
    assert (
        out.count(
            "  hold 16 -> 16; rule queue_bound (target_queue_fraction=0.2, scale_up_factor=2); "
            "held by cooldown (cooldown_s=600, scale_down_cooldown_s=600); 75% of the step"
        )
        == 2
    )
    assert out.count("  " + decision_summary(state["history"][1]) + "\n") == 2
    assert out.splitlines()[-1] == "match: the replay gives the recorded decision"
    code, data = run_json(capsys, "simulate", "--state", str(path))
    assert code == 0
    assert data["replay"]["matches"] is True and data["replay"]["index"] == 1
    recorded = state["history"][1]
    for field in REPLAY_FIELDS:
        assert data["decision"][field] == recorded[field]
    assert (
        data["recorded"]
        == ScaleDecision.model_validate(
            {k: v for k, v in recorded.items() if k not in ("context", "inputs")}
        ).model_dump()
    )
    assert data["decision"]["action"] == "hold"


def test_simulate_state_decision_index(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps(recorded_state().model_dump()))
    for index in ("0", "-2"):
        code, data = run_json(capsys, "simulate", "--state", str(path), "--decision", index)
        assert code == 0
        assert data["replay"]["index"] == 0
        assert (data["decision"]["action"], data["decision"]["target_nodes"]) == ("scale_up", 32)
        assert data["recorded"]["target_nodes"] == 32
    code, out, err = run(capsys, "simulate", "--state", str(path), "--decision", "2")
    assert_one_line_error(code, out, err, "--decision 2 is out of range", "holds 2 decisions")


def test_simulate_state_tampered_record_does_not_match(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    state = recorded_state().model_dump()
    state["history"][0]["target_nodes"] = 64
    state["history"][0]["reason"] = "someone edited this"
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    code, out, err = run(capsys, "simulate", "--state", str(path), "--decision", "0")
    assert code == 1 and err == ""
    assert "scale_up 8 -> 64" in out and "scale_up 8 -> 32" in out
    assert out.splitlines()[-1] == (
        "MISMATCH: the replay differs in target_nodes, reason (exit status 1)"
    )
    code, out, _ = run(capsys, "--json", "simulate", "--state", str(path), "--decision", "0")
    assert code == 1
    data = json.loads(out)
    assert data["replay"]["matches"] is False
    assert data["replay"]["differences"] == ["target_nodes", "reason"]
    assert data["recorded"]["target_nodes"] == 64 and data["decision"]["target_nodes"] == 32
    # the newest record was not touched
    assert run(capsys, "simulate", "--state", str(path))[0] == 0


def test_simulate_state_tampered_inputs_do_not_match(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    state = recorded_state().model_dump()
    for entry in state["history"][0]["inputs"]["window"]["samples"]:
        entry["queue_s"] = 0.0
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    code, data = run_json(capsys, "simulate", "--state", str(path), "--decision", "0")
    assert code == 1
    assert data["replay"]["differences"] == ["action", "target_nodes", "rule", "reason"]


def test_simulate_state_skips_recoveries_and_refuses_to_replay_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    spot = Provider("spot", max_nodes=8, cost_per_node_hour=1.0, spot=True)
    backup = Provider("backup", max_nodes=16, cost_per_node_hour=2.0, spot=False)
    state = recorded_state()
    lost = LostPart(part="demo--spot", provider="spot", nodes=8, ranks=(0,), cause="preempted")
    job = {"job_name": "demo", "lost": [lost], "current_nodes": 16, "min_nodes": 1}
    grid = {"max_nodes": 32, "planner": GridPlanner((spot, backup)), "now": T0 + 120}
    budget = RecoveryPolicy(max_recoveries=1)  # the second loss gives up
    for launch, action in (("launch-1", "recover"), ("launch-2", "give_up")):
        decision = decide_recovery(
            launch_id=launch, memory=state.recovery, policy=budget, **job, **grid
        )
        assert decision.action == action
        state = remember_recovery(state, decision, decision.as_record({"job": "demo"}), 20)
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state.model_dump()))
    code, data = run_json(capsys, "simulate", "--state", str(path))
    assert code == 0  # the newest policy decision: the hold before the two recoveries
    assert (data["replay"]["index"], data["replay"]["history_size"]) == (1, 4)
    assert data["replay"]["matches"] is True and data["decision"]["action"] == "hold"
    for index, action in (("-1", "give_up"), ("2", "recover")):
        code, out, err = run(capsys, "simulate", "--state", str(path), "--decision", index)
        assert_one_line_error(
            code,
            out,
            err,
            f"history entry {int(index) % 4} is a recovery ({action}), not a policy decision, "
            "so it cannot be replayed",
        )


@pytest.mark.parametrize(
    ("document", "phrase"),
    [
        ({"a": 1, "b": 2}, "must hold a scale state"),
        ([1, 2], "must hold a scale state"),
        ({"key": "{not json"}, "the value of 'key' is not valid JSON"),
        (
            {"schema_version": 0, "job_name": "x"},
            "schema_version must be 2 (or 1, which is migrated), got 0; delete the job's Variable",
        ),
        (
            {"schema_version": 99, "job_name": "x"},
            "scale state schema_version 99 was written by a newer release of elasticgrid-provider",
        ),
        ({"schema_version": 1}, "missing the field 'job_name'"),
        (
            {"schema_version": 1, "job_name": "x", "window": {"size": 10, "samples": []}},
            "has no decisions in its history",
        ),
        (
            {
                "schema_version": 1,
                "job_name": "x",
                "window": {"size": 10, "samples": []},
                "history": [{"action": "hold"}],
            },
            "history entry 0: decision is missing the field",
        ),
    ],
)
def test_simulate_state_bad_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, document: Any, phrase: str
) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps(document))
    code, out, err = run(capsys, "simulate", "--state", str(path))
    assert_one_line_error(code, out, err, phrase)


def test_simulate_state_refuses_sample_options(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps(recorded_state().model_dump()))
    code, out, err = run(capsys, "simulate", "--state", str(path), "--samples", str(path))
    assert_one_line_error(code, out, err, "cannot be combined with --samples")
    code, out, err = run(capsys, "simulate", "--state", str(path), "--cooldown", "5")
    assert_one_line_error(code, out, err, "--cooldown cannot be combined with it")
    code, out, err = run(capsys, "simulate", "--state", str(path), "--timeline")
    assert_one_line_error(code, out, err, "--timeline cannot be combined with it")


def test_simulate_shows_an_unbounded_demand_in_words(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The queue fills every step: the demand has no bound, said so rather than 1.8e+308."""
    path = write_jsonl(tmp_path / "s.jsonl", [sample(step, 10.0, 10.0, 4) for step in range(4)])
    args = ("simulate", "--samples", path, "--now", str(T0), "--max-nodes", "8")
    code, out, _ = run(capsys, *args, "--deadline-in", "600", "--remaining-steps", "100")
    assert code == 0
    assert "demand          unbounded against a capacity of 0.1 steps/s (unbounded" in out
    assert "e+308" not in out and "inf" not in out
    code, data = run_json(capsys, *args)
    assert code == 0
    assert data["decision"]["projection"]["demand_per_s"] is None
