"""``elasticgrid providers``, ``plan`` and ``spec`` on the built-in grid, in text and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from elasticgrid_provider.core.providers import DEFAULT_PROVIDERS
from tests.cli.cli_support import (
    PLACEMENT_KEYS_0_1_0,
    assert_one_line_error,
    run,
    run_json,
)

AWS = next(provider for provider in DEFAULT_PROVIDERS if provider.name == "aws")

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
    # AWS on the product engine; GCP and Azure have none yet: plannable, never launched
    assert lines[2].split() == [
        "gcp",
        "us-central1",
        "64",
        "3.50",
        "A100",
        "yes",
        "gcp",
        "(plan",
        "only)",
    ]
    assert lines[3].split() == ["aws", "us-east-1", "64", "3.20", "p5.48xlarge", "yes", "ec2"]
    assert lines[4].split() == [
        "azure",
        "westeurope",
        "32",
        "3.90",
        "ND96asr",
        "yes",
        "azure",
        "(plan",
        "only)",
    ]
    assert "capacity 168 nodes, 8 on-demand and 160 spot" in out
    assert (
        "\nplan only: gcp, azure (no elasticgrid engine for their cloud yet; iroh-tinker's" in out
    )
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
    """elasticgrid 0.1.0 put 8 nodes on aws at $25.60/h."""
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
    """elasticgrid 0.1.0 charged $330.80/h."""
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
    # planned on gcp, which a launch refuses: the plan says so before anyone launches it
    assert "\nnote: provider 'gcp' can be planned but not launched: GCP has no elasticgrid " in out


def test_iroh_tinkers_own_cloud_engines_are_refused_at_plan_and_at_launch(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{"name": "aws", "max_nodes": 4, "cost_per_node_hour": 1.0}]))
    code, out, err = run(capsys, "plan", "--nodes", "2", "--providers", str(grid))
    assert_one_line_error(
        code,
        out,
        err,
        f"{grid}: provider 'aws' would launch on iroh-tinker's own AWS engine (engine 'aws'; a "
        "provider's engine is its name unless set), which leaves instances running when a "
        "launch fails and is never used: set its engine to 'ec2' (docs/clouds.md), or to 'ssh' "
        "for machines reached over SSH",
    )
    # spec renders what a launch would start: a share on gcp is refused, nothing is rendered
    code, out, err = run(capsys, "spec", "--nodes", "100")
    assert_one_line_error(code, out, err, "provider 'gcp' can be planned but not launched")


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
    assert table[2].split() == ["demo--aws", "aws", "2", "8-9", AWS.engine_target, "yes"]
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
        ("elasticgrid-job--aws", 62, 16, AWS.engine_target),
    ]
    aws = parts[1]["spec"]
    assert aws["name"] == "elasticgrid-job--aws"
    assert aws["num_nodes"] == 62 and aws["procs_per_node"] == 2
    assert aws["run"] == "python -m mytrain"
    assert aws["resources"]["infra"] == [AWS.engine_target]  # the ec2 engine's, never iroh's
    assert aws["resources"]["use_spot"] is True
    assert aws["rendezvous"] == {"mode": "s3", "uri": "s3://bucket/run-1"}
    assert aws["envs"]["ELASTICGRID_WORLD_SIZE"] == "140"
    assert aws["envs"]["ELASTICGRID_RANK_OFFSET"] == "16"
