"""``elasticgrid fleet`` on a real ledger on disk: providers x jobs, free nodes, the queue."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from elasticgrid_provider.core.fleet.ledger import QueuedRequest, enqueue, request_shrinks
from elasticgrid_provider.core.fleet.sharing import PreemptionPlan, Resize
from elasticgrid_provider.hooks.grid_ledger import GRID_FOLDER, LEDGER_NAME, GridLedgerStore
from tests.cli.cli_support import assert_one_line_error, run, run_json
from tests.core.fleet.test_ledger import NEW_LAUNCH, OLD_LAUNCH
from tests.hooks.test_grid_ledger import reserve_in, write_manifest

CAPACITIES = {"local": 4, "aws": 8}


@pytest.fixture
def grid(tmp_path: Path) -> Path:
    """A jobs root where 'train' runs 2 local nodes (confirmed by its launch record),
    'tune' reserved 1 local and 3 aws, and two requests wait."""
    store = GridLedgerStore(tmp_path)
    with store.transaction() as txn:
        reserve_in(txn, "train", {"local": 2}, OLD_LAUNCH, CAPACITIES, priority=1, min_nodes=1)
        reserve_in(txn, "tune", {"local": 1, "aws": 3}, NEW_LAUNCH, CAPACITIES)
        eval_request = QueuedRequest("eval", 4, 2, txn.now + 5, lease_s=120)
        ledger = enqueue(txn.ledger, eval_request, now=txn.now)
        txn.ledger = enqueue(
            ledger,
            QueuedRequest("urgent", 2, 1, txn.now + 9, priority=5, timeout_s=600),
            now=txn.now,
        )
    write_manifest(tmp_path, "train", OLD_LAUNCH, {"local": 2})
    return tmp_path


def test_fleet_shows_providers_by_jobs_free_nodes_and_the_queue(capsys, grid):
    code, out, err = run(capsys, "fleet", "--jobs-root", str(grid))
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"grid ledger: {grid / GRID_FOLDER / LEDGER_NAME}"
    assert lines[1] == "capacities: recorded in the ledger"
    table = [line.split("  ") for line in lines[3:6]]
    assert [[cell.strip() for cell in row if cell.strip()] for row in table] == [
        ["provider", "capacity", "free", "pool", "train", "tune"],
        ["aws", "8", "5", "-", "-", "3 reserved"],  # reserved with no pool recorded
        ["local", "4", "1", "local", "2 held", "1 reserved"],  # learnt from train's record
    ]
    queue = out[out.index("queue (served in this order):") : out.index("shrink requests")]
    queue = queue.strip().splitlines()
    assert [line.split()[:2] for line in queue[2:]] == [["1", "urgent"], ["2", "eval"]]
    assert queue[1].split()[-5:] == ["timeout", "last", "look", "lease", "why"]
    # a 600 s timeout, the default lease; no audited round names it yet: no reason
    assert queue[2].split()[-4:][::2] == ["600s", "600s"] and queue[2].split()[-1] == "-"
    assert queue[3].split()[-2] == "120s"
    assert "allocation rounds: none recorded" in out


def test_fleet_shows_the_shrink_requests_next_to_the_queue(capsys, grid):
    code, out, _ = run(capsys, "fleet", "--jobs-root", str(grid))
    assert code == 0 and "shrink requests: none" in out
    with GridLedgerStore(grid).transaction() as txn:
        plan = PreemptionPlan("urgent", (Resize("tune", 4, 2, "urgent"),), 2, 2)
        txn.ledger = request_shrinks(txn.ledger, plan, by_priority=5, now=txn.now)

    code, out, err = run(capsys, "fleet", "--jobs-root", str(grid))

    assert (code, err) == (0, "")
    after_queue = out[out.index("queue (served in this order):") :]
    shrinks = after_queue[after_queue.index("shrink requests") :].splitlines()
    assert shrinks[0] == "shrink requests (the job's next check shrinks it):"
    assert shrinks[1].split() == ["job", "shrink", "to", "asked", "by", "its", "priority", "since"]
    assert shrinks[2].split()[:4] == ["tune", "2", "urgent", "5"]
    code, data = run_json(capsys, "fleet", "--jobs-root", str(grid))
    assert [(s["job"], s["to_nodes"], s["by_job"], s["by_priority"]) for s in data["shrinks"]] == [
        ("tune", 2, "urgent", 5)
    ]


def test_fleet_json_and_capacities_from_a_providers_file(capsys, grid, tmp_path):
    providers = tmp_path / "providers.json"
    providers.write_text(json.dumps([{"name": "local", "max_nodes": 3, "cost_per_node_hour": 0}]))
    code, data = run_json(capsys, "fleet", "--jobs-root", str(grid), "--providers", str(providers))
    assert code == 0
    assert data["capacity_source"] == f"from {providers}, else recorded in the ledger"
    assert {p["name"]: (p["capacity"], p["free"]) for p in data["providers"]} == {
        "local": (3, 0),
        "aws": (8, 5),  # not in the file: the capacity the ledger recorded
    }
    assert data["providers"][1]["jobs"] == {
        "train": {"held": 2, "reserved": 0},
        "tune": {"held": 0, "reserved": 1},
    }
    assert [(j["job"], j["priority"], j["held"], j["reserved"]) for j in data["jobs"]] == [
        ("train", 1, {"local": 2}, {}),
        ("tune", 0, {}, {"aws": 3, "local": 1}),
    ]
    assert [(r["position"], r["job"]) for r in data["queue"]] == [(1, "urgent"), (2, "eval")]
    assert data["note"] is None


def test_fleet_on_a_corrupt_ledger_shows_it_rebuilt_and_writes_nothing(capsys, grid):
    path = grid / GRID_FOLDER / LEDGER_NAME
    path.write_text("[]")
    code, data = run_json(capsys, "fleet", "--jobs-root", str(grid))
    assert code == 0
    assert (
        "cannot be read" in data["note"] and "rebuilt from the jobs' launch records" in data["note"]
    )
    # a rebuilt ledger knows no capacity, and no connection sets a grid: no built-in grid
    assert data["capacity_source"].startswith("none known")
    assert [p["name"] for p in data["providers"]] == ["local"]
    assert [(j["job"], j["held"]) for j in data["jobs"]] == [("train", {"local": 2})]
    assert data["queue"] == []
    assert path.read_text() == "[]"


def test_fleet_on_an_empty_root(capsys, tmp_path):
    code, out, _ = run(capsys, "fleet", "--jobs-root", str(tmp_path))
    assert code == 0
    assert "note: no grid ledger at" in out and "queue: empty" in out
    assert not (tmp_path / GRID_FOLDER).exists()  # looking creates nothing


@pytest.mark.parametrize(
    ("argv", "phrase"),
    [
        (
            ["--jobs-root", "/no/such/root"],
            "the jobs root must be an existing folder, got '/no/such/root' (from --jobs-root",
        ),
        (["--providers", "/no/such/file.json"], "/no/such/file.json"),
        (["--nodes", "3"], "unrecognized arguments: --nodes 3"),
    ],
)
def test_fleet_bad_input_is_one_line_exit_2(capsys, tmp_path, argv, phrase):
    if argv[0] == "--providers":
        argv = ["--jobs-root", str(tmp_path), *argv]
    code, out, err = run(capsys, "fleet", *argv)
    assert_one_line_error(code, out, err, phrase)
