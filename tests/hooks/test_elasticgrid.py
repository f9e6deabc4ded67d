"""ElasticGridHook: the ``elasticgrid`` connection as real tasks read it.

The connection is a real Airflow connection, given the way a deployment can
give it: ``AIRFLOW_CONN_ELASTICGRID_DEFAULT`` in JSON form, read by Airflow's
own environment-variables secrets backend from inside the task. The DAGs
(``tests/dags/connection_dags.py``) pass no grid and no planner settings, so
whatever the placement shows came from the connection.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook
from tests.airflow_support import run_dag
from tests.dag_settings import TWO_LOCAL_PROVIDERS

pytestmark = pytest.mark.airflow

CONN = "connection 'elasticgrid_default'"
# a grid unlike the built-in one: which shares come out shows which grid and settings applied
GRID = [
    {"name": "cheap", "region": "r-1", "max_nodes": 4, "cost_per_node_hour": 0.5, "spot": True},
    {"name": "dear", "max_nodes": 10, "cost_per_node_hour": 2.0, "spot": False},
]


def _connection(monkeypatch: pytest.MonkeyPatch, **extra: object) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_ELASTICGRID_DEFAULT",
        json.dumps({"conn_type": "elasticgrid", "extra": extra}),
    )


def _shares(placement: dict) -> list[tuple[str, int]]:
    return [(share["provider"], share["nodes"]) for share in placement["assignments"]]


def _output(capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> str:
    """What the task logged: pytest routes Airflow's lines to stdout or to caplog."""
    captured = capfd.readouterr()
    return captured.out + captured.err + caplog.text


@pytest.mark.parametrize(
    "providers",
    [json.dumps(GRID), GRID, json.dumps({"providers": GRID})],
    ids=["json-text", "json-list", "json-object"],
)
def test_the_connection_grid_is_used(airflow_db, monkeypatch, capfd, caplog, providers):
    _connection(monkeypatch, providers=providers)
    result = run_dag("plan_from_connection", {"nodes": 5})
    assert result.task_states == {"plan": "success"}
    placement = result.xcom("plan")
    assert _shares(placement) == [("cheap", 4), ("dear", 1)]
    assert placement["cost_per_hour"] == 4.0
    assert placement["infra_refs"] == ["cheap/r-1", "dear"]
    assert f"Placed 5 nodes over {CONN} (prefer=cost, max_spot_fraction=1)" in _output(
        capfd, caplog
    )


@pytest.mark.parametrize(
    ("settings", "shares", "logged"),
    [
        (
            {"max_spot_fraction": 0.2},
            [("cheap", 1), ("dear", 4)],
            "prefer=cost, max_spot_fraction=0.2",
        ),
        # the UI form stores what was typed, as text
        (
            {"max_spot_fraction": "0.2"},
            [("cheap", 1), ("dear", 4)],
            "prefer=cost, max_spot_fraction=0.2",
        ),
        ({"prefer": "balance"}, [("cheap", 3), ("dear", 2)], "prefer=balance, max_spot_fraction=1"),
        (
            {"prefer": "balance", "max_spot_fraction": 0.4},
            [("cheap", 2), ("dear", 3)],
            "prefer=balance, max_spot_fraction=0.4",
        ),
    ],
    ids=["spot-number", "spot-text", "balance", "balance-and-spot"],
)
def test_the_connection_planner_defaults_apply(
    airflow_db, monkeypatch, capfd, caplog, settings, shares, logged
):
    _connection(monkeypatch, providers=json.dumps(GRID), **settings)
    result = run_dag("plan_from_connection", {"nodes": 5})
    assert result.task_states == {"plan": "success"}
    assert _shares(result.xcom("plan")) == shares
    assert f"Placed 5 nodes over {CONN} ({logged})" in _output(capfd, caplog)


BAD_GRID = [{**GRID[0], "max_nodes": -1}, GRID[1]]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"providers": json.dumps(BAD_GRID)},
            f"{CONN} field providers: provider 'cheap' max_nodes must be at least 0, got -1",
        ),
        (
            {"providers": '[{"name": "cheap", "max_nodes": 4'},
            f"{CONN} field providers is not valid JSON: Expecting ',' delimiter",
        ),
        (
            {"providers": json.dumps([GRID[0], {"max_nodes": 2, "cost_per_node_hour": 1.0}])},
            f"{CONN} field providers: providers entry 1 is missing the field 'name'",
        ),
        (
            {"providers": "42"},
            f"{CONN} field providers: providers must be a JSON list or an object with a "
            "'providers' list, got 42",
        ),
        (
            {"providers": json.dumps(GRID), "max_spot_fraction": 1.5},
            f"{CONN} field max_spot_fraction must be at most 1, got 1.5",
        ),
        (
            {"providers": json.dumps(GRID), "max_spot_fraction": "most"},
            f"{CONN} field max_spot_fraction must be a number, got 'most'",
        ),
        (
            {"providers": json.dumps(GRID), "prefer": "fastest"},
            f"{CONN} field prefer must be one of 'cost', 'balance', got 'fastest'",
        ),
    ],
    ids=[
        "negative-max-nodes",
        "invalid-json",
        "provider-without-name",
        "not-a-list",
        "spot-above-one",
        "spot-not-a-number",
        "unknown-prefer",
    ],
)
def test_a_bad_connection_fails_the_task_with_one_clear_sentence(
    airflow_db, monkeypatch, capfd, caplog, extra, message
):
    _connection(monkeypatch, **extra)
    result = run_dag("plan_from_connection", {"nodes": 5})
    assert result.task_states == {"plan": "failed"}
    assert result.xcom("plan") is None
    output = _output(capfd, caplog)
    # the whole exception text is the one sentence: nothing chained, nothing after it
    assert f"AirflowFailException: {message}" in output, output[-3000:]
    failure = output.split("AirflowFailException: ", 1)[1].splitlines()[0]
    assert failure == message


def test_without_a_connection_the_builtin_grid_applies_and_the_log_says_so(
    airflow_db, monkeypatch, capfd, caplog
):
    monkeypatch.delenv("AIRFLOW_CONN_ELASTICGRID_DEFAULT", raising=False)
    result = run_dag("plan_from_connection", {"nodes": 100})
    assert result.task_states == {"plan": "success"}
    assert _shares(result.xcom("plan")) == [("local", 8), ("aws", 64), ("gcp", 28)]
    output = _output(capfd, caplog)
    assert (
        "Connection 'elasticgrid_default' does not exist; using the built-in default grid."
        in output
    )
    assert "Placed 100 nodes over the built-in default grid" in output


def test_a_connection_without_a_grid_keeps_the_builtin_grid_but_its_settings(
    airflow_db, monkeypatch, capfd, caplog
):
    _connection(monkeypatch, prefer="balance", providers="")
    result = run_dag("plan_from_connection", {"nodes": 8})
    assert result.task_states == {"plan": "success"}
    # balance over the built-in grid: 2 per provider (cost would put all 8 on "local")
    assert sorted(_shares(result.xcom("plan"))) == [
        ("aws", 2),
        ("azure", 2),
        ("gcp", 2),
        ("local", 2),
    ]
    output = _output(capfd, caplog)
    assert "does not exist" not in output
    assert "Placed 8 nodes over the built-in default grid (prefer=balance" in output


def test_jobs_go_under_the_connections_jobs_root(airflow_db, jobs_root, monkeypatch):
    _connection(monkeypatch, providers=json.dumps(TWO_LOCAL_PROVIDERS), jobs_root=str(jobs_root))
    result = run_dag("launch_from_connection", {"job_name": "conn-root", "nodes": 3, "steps": 2})
    assert result.task_states == {"plan": "success", "launch": "success"}
    job = result.xcom("launch")
    assert job["status"] == "done"
    assert [(part["name"], part["nodes"]) for part in job["parts"]] == [
        ("conn-root--onprem", 2),
        ("conn-root--cloud", 1),
    ]
    manifest = json.loads((jobs_root / "conn-root" / "manifest.json").read_text())
    assert manifest["placement"]["total_nodes"] == 3
    for part in job["parts"]:
        assert Path(part["job_dir"]) == jobs_root / part["name"]
        assert (jobs_root / part["name"] / "job.json").exists()
    default_root = Path(os.environ["IROH_TINKER_HOME"]) / "jobs"
    assert not list(default_root.glob("conn-root*"))


MISSING = (
    "elasticgrid_conn_id 'elasticgrid_typo' names a connection that does not exist; create it, "
    "or leave elasticgrid_conn_id unset to use 'elasticgrid_default' or the built-in grid"
)


def _failure_line(output: str, exception: str) -> str:
    """The one line after ``<exception>: `` in the task log."""
    assert f"{exception}: " in output, output[-3000:]
    return output.split(f"{exception}: ", 1)[1].splitlines()[0]


def test_a_missing_explicit_connection_fails_planning_instead_of_falling_back(
    airflow_db, monkeypatch, capfd, caplog
):
    # the default connection exists: a typo must not fall back to it either
    _connection(monkeypatch, providers=json.dumps(GRID))
    result = run_dag("plan_with_missing_connection", {"nodes": 5})
    assert result.task_states == {"plan": "failed"}
    assert result.xcom("plan") is None
    output = _output(capfd, caplog)
    assert _failure_line(output, "AirflowFailException") == MISSING
    assert "built-in" not in output.replace(MISSING, "")


def test_a_missing_explicit_connection_fails_the_launch_and_starts_nothing(
    airflow_db, jobs_root, capfd, caplog
):
    from iroh_tinker.cloud import JobManager

    default_root = Path(os.environ["IROH_TINKER_HOME"]) / "jobs"
    try:
        result = run_dag("launch_with_missing_connection", {"job_name": "typo", "nodes": 1})
        assert result.task_states == {"plan": "success", "launch": "failed"}
        assert _failure_line(_output(capfd, caplog), "AirflowFailException") == MISSING
        for root in (jobs_root, default_root):
            assert not list(root.glob("typo*")), f"a job was started under {root}"
    finally:  # a regression must not leave ranks running under the default root
        manager = JobManager(root=default_root)
        for state in manager.jobs():
            if state.name.startswith("typo") and manager.status(state.name).status == "running":
                manager.stop(state.name)


def test_a_missing_explicit_connection_fails_the_scale_check_not_skips_it(
    airflow_db, jobs_root, capfd, caplog
):
    result = run_dag("scale_check_with_missing_connection", {"job_name": "typo-check"})
    assert result.task_states == {"scale_check": "failed"}  # soft_fail does not hide it
    assert _failure_line(_output(capfd, caplog), "ElasticGridError") == MISSING
    assert not list(jobs_root.glob("typo-check*"))


def test_without_a_connection_an_inline_grid_is_not_called_the_builtin_grid(
    airflow_db, monkeypatch, capfd, caplog
):
    monkeypatch.delenv("AIRFLOW_CONN_ELASTICGRID_DEFAULT", raising=False)
    result = run_dag("plan_inline_grid_without_connection", {"nodes": 3})
    assert result.task_states == {"plan": "success"}
    assert _shares(result.xcom("plan")) == [("onprem", 2), ("cloud", 1)]
    output = _output(capfd, caplog)
    assert "built-in" not in output
    assert (
        "Connection 'elasticgrid_default' does not exist; using the task's providers and "
        "the default planner settings." in output
    )
    assert "Placed 3 nodes over the task's providers argument" in output


# -- the hook on its own -------------------------------------------------------


def test_arguments_override_the_connection(monkeypatch, tmp_path):
    _connection(monkeypatch, providers=json.dumps(GRID), jobs_root="/nowhere/conn-root")
    from_connection = ElasticGridHook()
    assert [p.name for p in from_connection.settings.providers] == ["cheap", "dear"]
    assert from_connection.jobs_root == Path("/nowhere/conn-root")
    overridden = ElasticGridHook(providers=TWO_LOCAL_PROVIDERS, jobs_root=str(tmp_path))
    assert [p.name for p in overridden.settings.providers] == ["onprem", "cloud"]
    assert overridden.settings.source == "the task's providers argument"
    assert overridden.jobs_root == tmp_path.resolve()
