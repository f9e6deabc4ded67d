"""The ``elasticgrid`` command (SPEC 4.5, 4.6): every command in text and JSON, and its errors.

Most tests call :func:`main` in-process; one test runs the installed console
script and ``python -m elasticgrid_provider`` to prove the entry points work.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from elasticgrid_provider.cli import REPLAY_FIELDS, main
from elasticgrid_provider.core.formatting import decision_summary
from elasticgrid_provider.core.samples import MetricsWindow, StepSample
from elasticgrid_provider.core.scheduler import NO_COOLDOWN, ElasticScheduler, ScaleDecision
from elasticgrid_provider.core.state import DecisionInputs, DecisionRecord, ScaleState

REPO = Path(__file__).resolve().parents[2]
QUEUE_BOUND_EXAMPLE = REPO / "example_dags" / "samples" / "queue_bound.jsonl"
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
PLACEMENT_KEYS_0_1_0 = {
    "assignments",
    "total_nodes",
    "cost_per_hour",
    "spot_fraction",
    "infra_refs",
}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``main(argv)``: exit status, stdout, stderr."""
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code, out, err = run(capsys, *argv, "--json")
    assert err == ""
    return code, json.loads(out)


def sample(
    step: int, duration_s: float, queue_s: float = 0.0, nodes: int = 8, **extra: Any
) -> dict[str, Any]:
    return {"step": step, "duration_s": duration_s, "queue_s": queue_s, "nodes": nodes, **extra}


def write_jsonl(path: Path, entries: list[Any]) -> str:
    path.write_text("".join(json.dumps(entry) + "\n" for entry in entries))
    return str(path)


def queue_bound(count: int, *, nodes: int = 8, step_s: float = 40.0) -> list[dict[str, Any]]:
    """``count`` steps of which 75% is queue: queue-bound, no ``time`` field."""
    return [sample(step, step_s, 0.75 * step_s, nodes, tokens=1000) for step in range(1, count + 1)]


def assert_one_line_error(code: int, out: str, err: str, *phrases: str) -> None:
    assert code == 2
    assert out == ""
    assert err.startswith("error: ")
    assert err.count("\n") == 1 and err.endswith("\n")
    assert "Traceback" not in err
    for phrase in phrases:
        assert phrase in err, err


# -- providers ------------------------------------------------------------------------


def test_providers_text_shows_the_default_grid(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "providers")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == [
        "name",
        "region",
        "max_nodes",
        "$/node/h",
        "accelerator",
        "spot",
        "engine",
    ]
    assert lines[1].split() == ["local", "-", "8", "0.00", "-", "no", "local"]
    assert lines[2].split() == ["gcp", "us-central1", "64", "3.50", "A100", "yes", "gcp"]
    assert lines[3].split() == ["aws", "us-east-1", "64", "3.20", "p5.48xlarge", "yes", "aws"]
    assert lines[4].split() == ["azure", "westeurope", "32", "3.90", "ND96asr", "yes", "azure"]
    assert "capacity 168 nodes, 8 on-demand and 160 spot" in out
    # aligned: numbers are right-aligned under their header
    end = lines[0].index("max_nodes") + len("max_nodes")
    assert [line[end - 2 : end] for line in lines[1:5]] == [" 8", "64", "64", "32"]


def test_providers_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = run_json(capsys, "providers")
    assert code == 0
    assert [p["name"] for p in data["providers"]] == ["local", "gcp", "aws", "azure"]
    assert data["providers"][1] == {
        "name": "gcp",
        "region": "us-central1",
        "max_nodes": 64,
        "cost_per_node_hour": 3.5,
        "accelerator": "A100",
        "spot": True,
        "engine": "gcp",
    }


@pytest.mark.parametrize("wrapped", [False, True], ids=["list", "object"])
def test_providers_file(capsys: pytest.CaptureFixture[str], tmp_path: Path, wrapped: bool) -> None:
    entries = [
        {"name": "onprem", "max_nodes": 4, "cost_per_node_hour": 0.5, "spot": False},
        {
            "name": "cloud",
            "region": "eu",
            "max_nodes": 10,
            "cost_per_node_hour": 2,
            "engine": "local",
        },
    ]
    path = tmp_path / "grid.json"
    path.write_text(json.dumps({"providers": entries} if wrapped else entries))
    code, data = run_json(capsys, "providers", "--providers", str(path))
    assert code == 0
    assert [(p["name"], p["engine"]) for p in data["providers"]] == [
        ("onprem", "onprem"),
        ("cloud", "local"),
    ]
    code, out, _ = run(capsys, "plan", "--nodes", "6", "--providers", str(path))
    assert code == 0
    assert "6 nodes on 2 providers, $6.00/h" in out


# -- plan -----------------------------------------------------------------------------


def test_plan_8_nodes_runs_on_local_for_free(capsys: pytest.CaptureFixture[str]) -> None:
    """SPEC 4.6.1: 0.1.0 put 8 nodes on aws at $25.60/h."""
    code, data = run_json(capsys, "plan", "--nodes", "8")
    assert code == 0
    assert set(data) >= PLACEMENT_KEYS_0_1_0
    assert [(a["provider"], a["nodes"]) for a in data["assignments"]] == [("local", 8)]
    assert data["cost_per_hour"] == 0.0
    assert data["total_nodes"] == 8
    assert data["spot_fraction"] == 0.0
    code, out, _ = run(capsys, "plan", "--nodes", "8")
    assert code == 0
    assert out.splitlines()[1].split() == ["local", "-", "no", "8", "0.00", "0.00"]
    assert "$0.00/h" in out


def test_plan_100_nodes_costs_302_80(capsys: pytest.CaptureFixture[str]) -> None:
    """SPEC 4.6.1: 0.1.0 charged $330.80/h."""
    code, data = run_json(capsys, "plan", "--nodes", "100")
    assert code == 0
    assert set(data) >= PLACEMENT_KEYS_0_1_0
    assert data["cost_per_hour"] == 302.80
    assert [(a["provider"], a["nodes"]) for a in data["assignments"]] == [
        ("local", 8),
        ("aws", 64),
        ("gcp", 28),
    ]
    assert data["infra_refs"] == ["local", "aws/us-east-1", "gcp/us-central1"]
    code, out, _ = run(capsys, "plan", "--nodes", "100")
    assert code == 0
    assert out.splitlines()[4].split() == ["total", "92%", "100", "302.80"]
    assert "100 nodes on 3 providers, $302.80/h, 92 on spot" in out
    assert "failover order: local, aws/us-east-1, gcp/us-central1" in out


def test_plan_json_flag_before_or_after_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    before = run(capsys, "--json", "plan", "--nodes", "8")
    after = run(capsys, "plan", "--nodes", "8", "--json")
    assert before == after
    assert json.loads(before[1])["total_nodes"] == 8


def test_plan_policy_options(capsys: pytest.CaptureFixture[str]) -> None:
    _, balanced = run_json(capsys, "plan", "--nodes", "100", "--prefer", "balance")
    assert max(a["nodes"] for a in balanced["assignments"]) < 64
    assert balanced["total_nodes"] == 100
    _, capped = run_json(capsys, "plan", "--nodes", "10", "--max-spot-fraction", "0")
    # only 8 on-demand nodes exist: the job is placed anyway with the fewest spot nodes
    assert [(a["provider"], a["nodes"]) for a in capped["assignments"]] == [
        ("local", 8),
        ("aws", 2),
    ]
    code, out, _ = run(capsys, "plan", "--nodes", "10", "--max-spot-fraction", "0")
    assert code == 0 and "note: only 8 nodes are on-demand, so 2 go to spot" in out


def test_plan_zero_nodes_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = run_json(capsys, "plan", "--nodes", "0")
    assert code == 2
    assert data == {"error": "nodes must be at least 1, got 0"}


# -- spec -----------------------------------------------------------------------------


def test_spec_text_shows_one_part_per_provider(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "spec", "--nodes", "10", "--name", "demo")
    assert code == 0 and err == ""
    assert "job demo: 10 nodes in 2 parts, world size 10" in out
    table = out.split("\n\n")[1].splitlines()
    assert table[1].split() == ["demo--local", "local", "8", "0-7", "local", "no"]
    assert table[2].split() == ["demo--aws", "aws", "2", "8-9", "aws/us-east-1", "yes"]
    assert "demo--aws (rank offset 8):" in out
    assert '"ELASTICGRID_RANK_OFFSET": "8"' in out
    assert "rendezvous dir:/tmp/elasticgrid/demo/rendezvous (default" in out


def test_spec_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = run_json(
        capsys,
        "spec",
        "--nodes",
        "70",
        "--run",
        "python -m mytrain",
        "--procs-per-node",
        "2",
        "--rendezvous",
        "s3://bucket/run-1",
    )
    assert code == 0
    assert set(data["placement"]) >= PLACEMENT_KEYS_0_1_0
    assert data["job_name"] == "elasticgrid-job"
    assert data["world_size"] == 140
    parts = data["parts"]
    assert [(p["part_name"], p["nodes"], p["rank_offset"], p["infra"]) for p in parts] == [
        ("elasticgrid-job--local", 8, 0, "local"),
        ("elasticgrid-job--aws", 62, 16, "aws/us-east-1"),
    ]
    aws = parts[1]["spec"]
    assert aws["name"] == "elasticgrid-job--aws"
    assert aws["num_nodes"] == 62 and aws["procs_per_node"] == 2
    assert aws["run"] == "python -m mytrain"
    assert aws["resources"]["infra"] == ["aws/us-east-1"]
    assert aws["resources"]["use_spot"] is True
    assert aws["rendezvous"] == {"mode": "s3", "uri": "s3://bucket/run-1"}
    assert aws["envs"]["ELASTICGRID_WORLD_SIZE"] == "140"
    assert aws["envs"]["ELASTICGRID_RANK_OFFSET"] == "16"


# -- simulate -------------------------------------------------------------------------


def test_simulate_queue_bound_example_scales_up(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "simulate", "--samples", str(QUEUE_BOUND_EXAMPLE))
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "window kept 10 of 12 samples (--window-size 10)"
    # 75.1% of the step waited for a worker: 8 / (1 - 0.751) = 32.1, so 33 workers remove it
    assert "decision: scale_up 8 -> 33" in lines
    assert "(saturated, stalled)" in out
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
    assert ScaleDecision.from_dict(decision).target_nodes == 33
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
        **ElasticScheduler().thresholds(),
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
    code, data = run_json(
        capsys,
        "simulate",
        "--samples",
        path,
        "--now",
        str(T0),
        "--deadline-in",
        "10000",
        "--remaining-steps",
        "1000",
    )
    assert code == 0
    decision = data["decision"]
    assert decision["decided_at"] == T0 and decision["deadline_at"] == T0 + 10000
    # 8 * 20000 / (0.9 * 10000) = 17.8 nodes at linear scaling; the prior's 10% loss per
    # doubling makes it 21
    assert (decision["action"], decision["rule"], decision["target_nodes"]) == (
        "scale_up",
        "deadline_pressure",
        21,
    )
    assert decision["projection"]["current_finish_s"] == 20000.0
    code, out, _ = run(
        capsys,
        "simulate",
        "--samples",
        path,
        "--now",
        str(T0),
        "--deadline-in",
        "10000",
        "--remaining-steps",
        "1000",
    )
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


# -- simulate --state: replay ---------------------------------------------------------


def recorded_state() -> ScaleState:
    """A job's state with two real decisions: a scale-up, then a hold in cooldown."""
    scheduler = ElasticScheduler(cooldown_s=600)
    window = MetricsWindow(samples=tuple(StepSample(i, 40.0, 30.0, 8, 1000) for i in range(4)))
    state = ScaleState("demo", window=window, current_nodes=8)
    first = DecisionInputs(scheduler, window, T0, 8, NO_COOLDOWN)
    state = state.with_record(DecisionRecord(first.decide(), first, {"job": "demo"}))
    second = DecisionInputs(scheduler, window, T0 + 60, 16, state.cooldown)
    return state.with_record(DecisionRecord(second.decide(), second, {"job": "demo"}))


@pytest.mark.parametrize("form", ["bare", "exported", "exported-string"])
def test_simulate_state_replays_the_newest_decision(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, form: str
) -> None:
    state = recorded_state().to_dict()
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
        == ScaleDecision.from_dict(
            {k: v for k, v in recorded.items() if k not in ("context", "inputs")}
        ).to_dict()
    )
    assert data["decision"]["action"] == "hold"


def test_simulate_state_decision_index(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps(recorded_state().to_dict()))
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
    state = recorded_state().to_dict()
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
    state = recorded_state().to_dict()
    for entry in state["history"][0]["inputs"]["window"]["samples"]:
        entry["queue_s"] = 0.0
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    code, data = run_json(capsys, "simulate", "--state", str(path), "--decision", "0")
    assert code == 1
    assert data["replay"]["differences"] == ["action", "target_nodes", "rule", "reason"]


@pytest.mark.parametrize(
    ("document", "phrase"),
    [
        ({"a": 1, "b": 2}, "must hold a scale state"),
        ([1, 2], "must hold a scale state"),
        ({"key": "{not json"}, "the value of 'key' is not valid JSON"),
        (
            {"schema_version": 99, "job_name": "x"},
            "schema_version must be 2 (or 1, which is migrated), got 99; delete the job's Variable",
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
    path.write_text(json.dumps(recorded_state().to_dict()))
    code, out, err = run(capsys, "simulate", "--state", str(path), "--samples", str(path))
    assert_one_line_error(code, out, err, "cannot be combined with --samples")
    code, out, err = run(capsys, "simulate", "--state", str(path), "--cooldown", "5")
    assert_one_line_error(code, out, err, "--cooldown cannot be combined with it")
    code, out, err = run(capsys, "simulate", "--state", str(path), "--timeline")
    assert_one_line_error(code, out, err, "--timeline cannot be combined with it")


# -- user errors ----------------------------------------------------------------------


GOOD = [sample(1, 10.0), sample(2, 10.0)]


ERROR_CASES: list[tuple[dict[str, Any], list[str], list[str]]] = [
    (
        {},
        ["plan", "--nodes", "5", "--providers", "{tmp}/missing.json"],
        ["providers file", "missing.json does not exist"],
    ),
    (
        {"p.json": "[{"},
        ["plan", "--nodes", "5", "--providers", "{tmp}/p.json"],
        ["p.json is not valid JSON", "line 1 column 3"],
    ),
    (
        {"p.json": '[{"max_nodes": 3, "cost_per_node_hour": 1}]'},
        ["providers", "--providers", "{tmp}/p.json"],
        ["p.json: providers entry 0 is missing the field 'name'"],
    ),
    (
        {
            "p.json": '[{"name": "a", "max_nodes": 3, "cost_per_node_hour": 1},'
            ' {"name": "a", "max_nodes": 1, "cost_per_node_hour": 2}]'
        },
        ["plan", "--nodes", "1", "--providers", "{tmp}/p.json"],
        ["provider name 'a' appears more than once"],
    ),
    (
        {"p.json": '[{"name": "a", "max_nodes": "3", "cost_per_node_hour": 1}]'},
        ["plan", "--nodes", "1", "--providers", "{tmp}/p.json"],
        ["provider 'a' max_nodes must be a number, got '3'"],
    ),
    (
        {"p.json": '[{"name": "a", "max_nodes": 3, "cost_per_node_hour": NaN}]'},
        ["plan", "--nodes", "1", "--providers", "{tmp}/p.json"],
        ["cost_per_node_hour must be a finite number, got nan"],
    ),
    (
        {"p.json": '{"name": "a"}'},
        ["providers", "--providers", "{tmp}/p.json"],
        ["providers must be a JSON list"],
    ),
    ({}, ["plan", "--nodes", "169"], ["nodes 169 exceeds the grid's capacity of 168 nodes"]),
    ({}, ["spec", "--nodes", "500"], ["nodes 500 exceeds the grid's capacity of 168"]),
    ({}, ["plan", "--nodes", "-1"], ["nodes must be at least 1, got -1"]),
    ({}, ["plan", "--nodes", "0"], ["nodes must be at least 1, got 0"]),
    ({}, ["plan", "--nodes", "many"], ["argument --nodes: invalid int value: 'many'"]),
    ({}, ["plan"], ["the following arguments are required: --nodes"]),
    ({}, ["plan", "--nodes", "4", "--prefer", "fast"], ["invalid choice: 'fast'"]),
    (
        {},
        ["plan", "--nodes", "4", "--max-spot-fraction", "1.5"],
        ["max_spot_fraction must be at most 1, got 1.5"],
    ),
    (
        {},
        ["plan", "--nodes", "4", "--max-spot-fraction", "nan"],
        ["max_spot_fraction must be a finite number, got nan"],
    ),
    ({}, ["spec", "--nodes", "0"], ["nodes must be at least 1, got 0"]),
    ({}, ["spec", "--nodes", "4", "--name", "a--b"], ["job name must not contain '--'"]),
    ({}, ["spec", "--nodes", "4", "--rendezvous", "ftp://x"], ["rendezvous must be"]),
    ({}, ["frobnicate"], ["invalid choice: 'frobnicate'"]),
    ({}, [], ["the following arguments are required: COMMAND"]),
    (
        {},
        ["simulate", "--samples", "{tmp}/missing.jsonl"],
        ["samples file", "missing.jsonl does not exist"],
    ),
    ({}, ["simulate", "--samples", "{tmp}"], ["is a directory"]),
    ({"s.jsonl": ""}, ["simulate", "--samples", "{tmp}/s.jsonl"], ["holds no samples"]),
    (
        {"s.jsonl": '{"step": 1, "duration_s": 1}\n{"step": 2,\n'},
        ["simulate", "--samples", "{tmp}/s.jsonl"],
        ["s.jsonl line 2: not valid JSON"],
    ),
    (
        {"s.json": '[{"step": 1, "duration_s": 1},'},
        ["simulate", "--samples", "{tmp}/s.json"],
        ["s.json is not valid JSON"],
    ),
    (
        {"s.jsonl": '{"step": 1, "duration_s": 1}\n\n{"step": 3, "duration_s": NaN}\n'},
        ["simulate", "--samples", "{tmp}/s.jsonl"],
        ["s.jsonl line 3: sample duration_s must be a finite number, got nan"],
    ),
    (
        {"s.jsonl": '{"step": 1}\n'},
        ["simulate", "--samples", "{tmp}/s.jsonl"],
        ["s.jsonl line 1: sample is missing the field 'duration_s'"],
    ),
    (
        {"s.json": '[{"step": 1, "duration_s": 1}, {"step": 2, "duration_s": "2"}]'},
        ["simulate", "--samples", "{tmp}/s.json"],
        ["s.json index 1: sample duration_s must be a number, got '2'"],
    ),
    (
        {"s.jsonl": '{"step": 1, "duration_s": 1, "nodes": true}\n'},
        ["simulate", "--samples", "{tmp}/s.jsonl"],
        ["sample nodes must be a number, got True"],
    ),
    (
        {"s.jsonl": '{"step": 1, "duration_s": 1, "gpu": 3}\n'},
        ["simulate", "--samples", "{tmp}/s.jsonl"],
        ["sample has an unknown field 'gpu'"],
    ),
    (
        {"s.jsonl": '{"step": 1, "duration_s": 1, "time": Infinity}\n'},
        ["simulate", "--samples", "{tmp}/s.jsonl"],
        ["line 1: sample time must be a finite number, got inf"],
    ),
    (
        {"s.jsonl": '"hello"\n'},
        ["simulate", "--samples", "{tmp}/s.jsonl"],
        ["line 1: sample must be a JSON object"],
    ),
    (
        {"s.jsonl": GOOD},
        ["simulate", "--samples", "{tmp}/s.jsonl", "--window-size", "0"],
        ["--window-size must be at least 1, got 0"],
    ),
    (
        {"s.jsonl": GOOD},
        ["simulate", "--samples", "{tmp}/s.jsonl", "--nodes", "0"],
        ["--nodes must be at least 1, got 0"],
    ),
    (
        {"s.jsonl": GOOD},
        ["simulate", "--samples", "{tmp}/s.jsonl", "--cooldown", "-1"],
        ["--cooldown must be at least 0, got -1.0"],
    ),
    (
        {"s.jsonl": GOOD},
        ["simulate", "--samples", "{tmp}/s.jsonl", "--scale-up-factor", "1"],
        ["--scale-up-factor must be greater than 1"],
    ),
    (
        {"s.jsonl": GOOD},
        ["simulate", "--samples", "{tmp}/s.jsonl", "--min-nodes", "8", "--max-nodes", "4"],
        ["--max-nodes must be at least 8, got 4"],
    ),
    (
        {"s.jsonl": GOOD},
        ["simulate", "--samples", "{tmp}/s.jsonl", "--now", "nan"],
        ["--now must be a finite number, got nan"],
    ),
    (
        {"s.jsonl": GOOD},
        ["simulate", "--samples", "{tmp}/s.jsonl", "--remaining-steps", "9"],
        ["--remaining-steps only counts toward a deadline; it needs --deadline-in"],
    ),
    (
        {"s.jsonl": GOOD},
        [
            "simulate",
            "--samples",
            "{tmp}/s.jsonl",
            "--deadline-in",
            "9",
            "--remaining-steps",
            "-1",
        ],
        ["--remaining-steps must be at least 0, got -1.0"],
    ),
    (
        {"s.jsonl": GOOD},
        ["simulate", "--samples", "{tmp}/s.jsonl", "--decision", "0"],
        ["--decision picks a recorded decision; it needs --state FILE"],
    ),
    ({}, ["simulate"], ["simulate needs --samples FILE"]),
    (
        {"state.json": "nope"},
        ["simulate", "--state", "{tmp}/state.json"],
        ["state file", "is not valid JSON"],
    ),
]


@pytest.mark.parametrize(
    ("files", "argv", "phrases"),
    ERROR_CASES,
    ids=[" ".join(argv)[:60].replace("{tmp}/", "") or "no-args" for _, argv, _ in ERROR_CASES],
)
def test_user_errors_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    files: dict[str, Any],
    argv: list[str],
    phrases: list[str],
) -> None:
    for name, content in files.items():
        if isinstance(content, list):
            write_jsonl(tmp_path / name, content)
        else:
            (tmp_path / name).write_text(content)
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in argv]
    code, out, err = run(capsys, *argv)
    assert_one_line_error(code, out, err, *phrases)
    # with --json the same error is one JSON line on stdout
    code, out, err = run(capsys, "--json", *argv)
    assert code == 2 and err == ""
    assert out.count("\n") == 1
    assert set(json.loads(out)) == {"error"}
    for phrase in phrases:
        assert phrase in json.loads(out)["error"]


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "simulate", "--help")
    assert code == 0
    for flag in ("--window-size", "--timeline", "--state", "--decision", "--scale-down-cooldown"):
        assert flag in out


# -- the installed entry points ----------------------------------------------------------


def console_script() -> str:
    found = shutil.which("elasticgrid", path=os.path.dirname(sys.executable))
    found = found or shutil.which("elasticgrid")
    if found is None:
        pytest.fail("the elasticgrid console script is not installed next to the interpreter")
    return found


def test_console_script(tmp_path: Path) -> None:
    script = console_script()
    done = subprocess.run(
        [script, "plan", "--nodes", "100", "--json"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["cost_per_hour"] == 302.80

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 1, "duration_s": NaN}\n')
    done = subprocess.run(
        [script, "simulate", "--samples", str(bad)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (
        f"error: {bad} line 1: sample duration_s must be a finite number, got nan\n"
    )
    assert "Traceback" not in done.stderr

    done = subprocess.run(
        [sys.executable, "-m", "elasticgrid_provider", "plan", "--nodes", "8"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "8 nodes on 1 provider, $0.00/h" in done.stdout


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
