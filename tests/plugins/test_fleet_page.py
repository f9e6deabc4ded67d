"""The Fleet page on Airflow's real API app: a real ledger under the connection's jobs root."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from elasticgrid_provider.core.fleet.ledger import QueuedRequest, enqueue, request_shrinks
from elasticgrid_provider.core.fleet.sharing import PreemptionPlan, Resize
from elasticgrid_provider.core.formatting import clock_text
from elasticgrid_provider.core.state import ScaleState, state_variable_key
from elasticgrid_provider.hooks.grid_ledger import GRID_FOLDER, LEDGER_NAME, GridLedgerStore
from tests.core.fleet.test_ledger import NEW_LAUNCH, OLD_LAUNCH
from tests.hooks.test_grid_ledger import reserve_in, write_manifest

pytestmark = pytest.mark.airflow

GRID = [
    {"name": "local", "max_nodes": 4, "cost_per_node_hour": 0, "spot": False},
    {"name": "cloud", "max_nodes": 8, "cost_per_node_hour": 3.0},
]


@pytest.fixture(scope="module")
def client(airflow_db) -> Iterator[Any]:
    from airflow.api_fastapi.app import create_app, purge_cached_app
    from fastapi.testclient import TestClient

    purge_cached_app()
    with TestClient(create_app(apps="core")) as test_client:
        yield test_client
    purge_cached_app()


@pytest.fixture
def grid_root(jobs_root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The connection's jobs root and grid, with 'train' running 2 local nodes (its state
    Variable exists, so it has a page), 'tune' reserving 3 cloud, and 'eval' waiting."""
    from airflow.models.variable import Variable

    extra = {"jobs_root": str(jobs_root), "providers": GRID}
    monkeypatch.setenv(
        "AIRFLOW_CONN_ELASTICGRID_DEFAULT",
        json.dumps({"conn_type": "elasticgrid", "extra": extra}),
    )
    capacities = {"local": 4, "cloud": 8}
    with GridLedgerStore(jobs_root).transaction() as txn:
        reserve_in(txn, "train", {"local": 2}, OLD_LAUNCH, capacities)
        reserve_in(txn, "tune", {"cloud": 3}, NEW_LAUNCH, capacities)
        txn.ledger = enqueue(
            txn.ledger, QueuedRequest("eval", 4, 2, txn.now, priority=2), now=txn.now
        )
    write_manifest(jobs_root, "train", OLD_LAUNCH, {"local": 2})
    Variable.set(
        state_variable_key("train"), json.dumps(ScaleState("train", current_nodes=2).model_dump())
    )
    return jobs_root


def _token(role: str | None) -> dict[str, str]:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    user = SimpleAuthManagerUser(username="reader", role=role)
    return {"Authorization": f"Bearer {get_auth_manager().generate_jwt(user)}"}


def _text(page: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def test_the_fleet_page_shows_providers_by_jobs_free_nodes_and_the_queue(client, grid_root):
    assert client.get("/elasticgrid/fleet").status_code == 401
    response = client.get("/elasticgrid/fleet", headers=_token("op"))
    assert response.status_code == 200
    assert "default-src 'none'" in response.headers["content-security-policy"]
    text = _text(response.text)
    assert "capacities: the elasticgrid_default connection's grid" in text
    assert "provider capacity free eval train tune" not in text  # eval only waits
    assert (
        "provider capacity free pool train tune cloud 8 5 - - 3 reserved local 4 2 local 2 held -"
    ) in text  # the pool a name stands for is known once a launch record or reservation says
    assert (
        "Queue # job wants at least priority since timeout last look lease why 1 eval 4 2 2" in text
    )
    assert "No allocation round is recorded." in text
    # a job with a page links to it, in the iframe; one without has no link
    assert '<a href="/elasticgrid/jobs/train">train</a>' in response.text
    assert '<a href="/elasticgrid/jobs/tune">' not in response.text
    data = client.get("/elasticgrid/api/fleet", headers=_token("op")).json()
    assert {p["name"]: p["free"] for p in data["providers"]} == {"cloud": 5, "local": 2}
    assert [(r["position"], r["job"]) for r in data["queue"]] == [(1, "eval")]
    (waiting,) = data["queue"]
    assert (waiting["last_look"], waiting["lease_s"]) == (waiting["renewed_at"], 600.0)
    assert f"2 2 {clock_text(waiting['since'])} - {clock_text(waiting['last_look'])} 600s" in text


def _ask_tune_to_shrink(jobs_root: Path) -> None:
    """'eval' (priority 2, waiting) asks 'tune' (3 cloud nodes) to shrink to 1."""
    with GridLedgerStore(jobs_root).transaction() as txn:
        plan = PreemptionPlan("eval", (Resize("tune", 3, 1, "eval"),), 2, 2)
        txn.ledger = request_shrinks(txn.ledger, plan, by_priority=2, now=txn.now)


def test_the_fleet_page_shows_who_asked_whom_to_shrink_next_to_the_queue(client, grid_root):
    text = _text(client.get("/elasticgrid/fleet", headers=_token("op")).text)
    assert "No job is asked to shrink." in text
    _ask_tune_to_shrink(grid_root)

    text = _text(client.get("/elasticgrid/fleet", headers=_token("op")).text)

    assert "Shrink requests job shrink to asked by its priority since tune 1 eval 2" in text
    assert text.index("Queue #") < text.index("Shrink requests")
    data = client.get("/elasticgrid/api/fleet", headers=_token("op")).json()
    assert [(s["job"], s["to_nodes"], s["by_job"]) for s in data["shrinks"]] == [
        ("tune", 1, "eval")
    ]
    hidden = _text(client.get("/elasticgrid/fleet", headers=_token(None)).text)
    assert (
        "Shrink requests job shrink to asked by its priority since other jobs 1 other jobs 2"
        in (hidden)
    )
    assert "tune" not in hidden and "eval" not in hidden


@pytest.mark.parametrize("role", [None, "viewer"])  # a viewer may not read Variables
def test_a_reader_who_may_not_read_the_jobs_sees_their_nodes_as_other_jobs(client, grid_root, role):
    response = client.get("/elasticgrid/fleet", headers=_token(role))
    assert response.status_code == 200
    text = _text(response.text)
    assert "train" not in text and "tune" not in text and "eval" not in text
    assert (
        "provider capacity free pool other jobs cloud 8 5 - 3 reserved local 4 2 local 2 held"
        in text
    )
    assert "No job you may see holds nodes." in text


def test_the_page_survives_a_corrupt_ledger_and_says_so(client, grid_root):
    path = grid_root / GRID_FOLDER / LEDGER_NAME
    path.write_text('{"holdings": "nonsense"')
    response = client.get("/elasticgrid/fleet", headers=_token("op"))
    assert response.status_code == 200
    text = _text(response.text)
    assert f"the grid ledger {path} cannot be read" in text
    assert "shown rebuilt from the jobs' launch records" in text
    assert "local 4 2 local 2 held" in text  # what runs, from train's launch record
    assert path.read_text() == '{"holdings": "nonsense"'  # the page never writes


def test_the_page_survives_a_missing_ledger_and_says_so(client, grid_root):
    (grid_root / GRID_FOLDER / LEDGER_NAME).unlink()
    text = _text(client.get("/elasticgrid/fleet", headers=_token("op")).text)
    assert "no grid ledger at" in text and "No request waits." in text


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


def test_the_cli_and_the_page_read_the_connections_jobs_root_and_agree(
    client, connection_in_the_db
):
    # one view of the grid: `elasticgrid fleet`, run as a user runs it (its own process, the
    # connection in the metadata DB, as `airflow connections add` leaves it) and the page
    cli = _cli_fleet()  # no --jobs-root: the connection's, from the metadata DB
    assert cli["jobs_root"] == str(connection_in_the_db.resolve())
    page = client.get("/elasticgrid/api/fleet", headers=_token("admin")).json()
    html = client.get("/elasticgrid/fleet", headers=_token("admin")).text
    # the pools the jobs use, with the capacities their reservations recorded; never the
    # built-in grid (aws, azure, gcp, local) that no job uses and no connection sets
    assert _grid(cli) == _grid(page)
    assert {name: capacity for name, (capacity, _, _) in _grid(page).items()} == POOLS
    assert {name: free for name, (_, free, _) in _grid(page).items()} == {"onprem": 1, "cloud": 1}
    assert cli["capacity_source"] == page["capacity_source"] == "recorded in the ledger"
    assert "aws" not in html and "azure" not in html
