"""``elasticgrid stop`` on real local iroh-tinker jobs: two parts (two providers on the local
engine), real rank processes, the real grid ledger."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from elasticgrid_provider.core.fleet.ledger import job_usage
from elasticgrid_provider.core.launch_spec import LaunchOptions
from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.providers import providers_from_dicts
from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook
from elasticgrid_provider.hooks.grid_ledger import GridLedgerStore
from tests.cli.cli_support import assert_one_line_error, run, run_json
from tests.dag_settings import SLEEPING_RUN, TWO_LOCAL_PROVIDERS
from tests.job_processes import is_alive, job_ranks

PLANNER = GridPlanner(providers=providers_from_dicts(TWO_LOCAL_PROVIDERS))
SLEEPING = LaunchOptions(run=SLEEPING_RUN, recovery={"mode": "none"})


def launch(jobs_root: Path, job: str, nodes: int) -> dict[int, str]:
    """Launch ``job`` at ``nodes`` (2 on onprem, the rest on cloud); its rank pids."""
    manager = ElasticGridHook(jobs_root=str(jobs_root)).launch_manager(job)
    manager.launch(PLANNER.plan(nodes), SLEEPING, startup_grace_s=1)
    ranks = job_ranks(job)
    assert len(ranks) == nodes
    return ranks


def manifest(jobs_root: Path, job: str) -> dict:
    return json.loads((jobs_root / job / "manifest.json").read_text())


@pytest.mark.airflow  # the jobs root comes from the elasticgrid_default connection
def test_stop_ends_every_part_records_it_releases_its_nodes_and_a_second_stop_has_nothing_left(
    jobs_root, capsys
):
    ranks = launch(jobs_root, "halted", 3)
    ledger = GridLedgerStore(jobs_root)
    assert job_usage(ledger.snapshot().ledger, "halted") == {"cloud": 1, "onprem": 2}
    launch_id = manifest(jobs_root, "halted")["launch_id"]
    capsys.readouterr()  # the launch's log

    code, report = run_json(capsys, "stop", "halted")  # no --jobs-root: the connection's

    assert code == 0
    assert report["parts"] == [
        {
            "name": "halted--onprem",
            "provider": "onprem",
            "engine": "local",
            "nodes": 2,
            "ranks": "0-1",
        },
        {"name": "halted--cloud", "provider": "cloud", "engine": "local", "nodes": 1, "ranks": "2"},
    ]
    assert (report["launch_id"], report["launch_state"], report["job_status"]) == (
        launch_id,
        "stopped",
        "stopped",
    )
    assert report["released_nodes"] == {"onprem": 2, "cloud": 1}
    assert report["nothing_left"] is None
    assert not [pid for pid in ranks if is_alive(pid)]
    assert job_ranks("halted") == {}
    recorded = manifest(jobs_root, "halted")
    assert (recorded["state"], recorded["down_reason"]) == (
        "stopped",
        "stopped with `elasticgrid stop`",
    )
    assert job_usage(ledger.snapshot().ledger, "halted") == {}

    code, out, err = run(capsys, "stop", "halted", "--jobs-root", str(jobs_root))

    assert (code, err) == (0, "")
    assert out == (
        f"Job 'halted' has nothing left to stop: its launch {launch_id} is stopped "
        "(stopped with `elasticgrid stop`).\n"
    )
    assert manifest(jobs_root, "halted") == recorded


def test_bad_input_is_one_line_and_creates_nothing(tmp_path, capsys, monkeypatch):
    root = tmp_path / "jobs"
    root.mkdir()
    code, out, err = run(capsys, "stop", "ghost", "--jobs-root", str(root))
    assert_one_line_error(code, out, err, f"job 'ghost' was never launched under {root}")
    assert list(root.iterdir()) == []  # no folder, no lock file for a job that does not exist
    code, out, err = run(capsys, "stop", "two--parts", "--jobs-root", str(root))
    assert_one_line_error(code, out, err, "job name must not contain '--'")
    code, out, err = run(capsys, "stop", "ghost", "--jobs-root", str(tmp_path / "nowhere"))
    assert_one_line_error(code, out, err, "the jobs root must be an existing folder")
    monkeypatch.delenv("AIRFLOW_CONN_ELASTICGRID_TYPO", raising=False)
    code, data = run_json(capsys, "stop", "ghost", "--conn-id", "elasticgrid_typo")
    assert code == 2
    assert data == {
        "error": "--conn-id 'elasticgrid_typo' names a connection that does not exist; "
        "create it, or give --jobs-root"
    }
