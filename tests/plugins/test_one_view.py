"""One view of the grid: ``elasticgrid fleet`` and the Fleet page read the same jobs root
and show the same providers, capacities and free nodes (the connection in the metadata DB,
as ``airflow connections add`` leaves it; the CLI as a user runs it, in its own process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from elasticgrid_provider.hooks.grid_ledger import GridLedgerStore
from tests.core.fleet.test_ledger import OLD_LAUNCH
from tests.hooks.test_grid_ledger import reserve_in
from tests.plugins.test_fleet_page import _token

pytestmark = pytest.mark.airflow

POOLS = {"onprem": 4, "cloud": 2}  # what the jobs' own grid (a task's providers) says


@pytest.fixture
def connection_in_the_db(airflow_db: Path, tmp_path: Path, monkeypatch) -> Iterator[Path]:
    """``elasticgrid_default`` in the metadata DB naming a jobs root (no grid), where two jobs
    hold nodes of a grid that is not the built-in one."""
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    monkeypatch.delenv("AIRFLOW_CONN_ELASTICGRID_DEFAULT", raising=False)
    monkeypatch.setenv("_AIRFLOW_PROCESS_CONTEXT", "server")  # as the api-server sets it
    root = tmp_path / "shared-jobs"
    root.mkdir()
    extra = json.dumps({"jobs_root": str(root)})
    with create_session() as session:
        session.add(Connection("elasticgrid_default", conn_type="elasticgrid", extra=extra))
    with GridLedgerStore(root).transaction() as txn:
        reserve_in(txn, "rel-lock", {"onprem": 1}, OLD_LAUNCH, POOLS)
        reserve_in(txn, "rel-big", {"onprem": 2, "cloud": 1}, OLD_LAUNCH, POOLS)
    try:
        yield root
    finally:
        with create_session() as session:
            session.query(Connection).filter(Connection.conn_id == "elasticgrid_default").delete()


def _cli_fleet(*argv: str) -> dict[str, Any]:
    environment = {k: v for k, v in os.environ.items() if k != "_AIRFLOW_PROCESS_CONTEXT"}
    result = subprocess.run(
        [sys.executable, "-m", "elasticgrid_provider", "fleet", "--json", *argv],
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def _grid(view: dict[str, Any]) -> dict[str, tuple[Any, Any, Any]]:
    return {p["name"]: (p["capacity"], p["free"], p["jobs"]) for p in view["providers"]}


def test_the_cli_and_the_page_read_the_connections_jobs_root_and_agree(connection_in_the_db):
    from airflow.api_fastapi.app import create_app, purge_cached_app
    from fastapi.testclient import TestClient

    cli = _cli_fleet()  # no --jobs-root: the connection's, from the metadata DB
    assert cli["jobs_root"] == str(connection_in_the_db.resolve())
    purge_cached_app()
    with TestClient(create_app(apps="core")) as client:
        page = client.get("/elasticgrid/api/fleet", headers=_token("admin")).json()
        html = client.get("/elasticgrid/fleet", headers=_token("admin")).text
    purge_cached_app()
    # the pools the jobs use, with the capacities their reservations recorded; never the
    # built-in grid (aws, azure, gcp, local) that no job uses and no connection sets
    assert _grid(cli) == _grid(page)
    assert {name: capacity for name, (capacity, _, _) in _grid(page).items()} == POOLS
    assert {name: free for name, (_, free, _) in _grid(page).items()} == {"onprem": 1, "cloud": 1}
    assert cli["capacity_source"] == page["capacity_source"] == "recorded in the ledger"
    assert "aws" not in html and "azure" not in html
    # an explicit root still wins
    assert _cli_fleet("--jobs-root", str(connection_in_the_db))["providers"] == cli["providers"]
