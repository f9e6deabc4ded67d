"""Parsing DAGs stays cheap: no iroh-tinker, no numpy, and the example DAGs parse cleanly.

Airflow imports DAG files (and so the provider's operator, sensor, hook and
trigger modules) every few seconds in the DAG processor; iroh-tinker pulls in
numpy and must only be imported when a task needs it. Every component also
imports the UI plugin module: it must not bring in FastAPI or the plugin's
app, which is built on the API server's first request.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import TESTS, airflow_command

EXAMPLE_DAGS = TESTS.parent / "example_dags"
HEAVY = ("iroh_tinker", "numpy")
API_ONLY = ("fastapi", "starlette", "elasticgrid_provider.plugins.app")

PARSE_EVERYTHING = """
import json, runpy, sys

import elasticgrid_provider.operators
import elasticgrid_provider.sensors
import elasticgrid_provider.hooks.elasticgrid
import elasticgrid_provider.triggers.job
from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook
from elasticgrid_provider.plugins.plugin import ElasticGridPlugin

plugin = ElasticGridPlugin()  # what every component's plugins manager does
api_only = sorted(
    {"fastapi", "starlette", "elasticgrid_provider.plugins.app"} & set(sys.modules)
)
dags = []
for path in sys.argv[1:]:
    dags.append(runpy.run_path(path, run_name="__dag_file__")["dag"])
ElasticGridHook(jobs_root="/nowhere")  # building a hook imports nothing either
heavy = sorted({name.split(".")[0] for name in sys.modules} & {"iroh_tinker", "numpy"})
import iroh_tinker.cloud  # the control: this import is what the check would catch
control = sorted({name.split(".")[0] for name in sys.modules} & {"iroh_tinker", "numpy"})
plugin.fastapi_apps[0]["app"].build()  # the control: building the app imports them
api_control = sorted(
    {"fastapi", "starlette", "elasticgrid_provider.plugins.app"} & set(sys.modules)
)
print(json.dumps({
    "dags": {dag.dag_id: sorted(dag.task_ids) for dag in dags},
    "heavy": heavy,
    "control": control,
    "api_only": api_only,
    "api_control": api_control,
}))
"""


def test_importing_the_provider_and_parsing_the_example_dags_imports_no_heavy_module():
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            PARSE_EVERYTHING,
            str(EXAMPLE_DAGS / "elastic_training.py"),
            str(EXAMPLE_DAGS / "elastic_rescale_check.py"),
            str(EXAMPLE_DAGS / "elastic_fleet.py"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["dags"] == {
        "elastic_training": ["launch", "plan", "relaunch", "replan", "scale_check", "stop"],
        "elastic_rescale_check": [
            "find_job",
            "plan",
            "resize",
            "scale_check",
            "start",
            "start_plan",
        ],
        "elastic_fleet": [
            "evaluate",
            "evaluate_plan",
            "pretrain_check",
            "pretrain_launch",
            "pretrain_plan",
            "pretrain_relaunch",
            "pretrain_replan",
        ],
    }
    assert report["heavy"] == []
    # the check can see them: importing iroh-tinker does bring both in
    assert report["control"] == sorted(HEAVY)
    # the UI plugin is declared without FastAPI; the app comes on its first request
    assert report["api_only"] == []
    assert report["api_control"] == sorted(API_ONLY)


def _airflow(dags_folder: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*airflow_command(), *arguments],
        env={**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder)},
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_example_dags_have_no_import_errors(airflow_db):
    result = _airflow(EXAMPLE_DAGS, "dags", "list-import-errors", "--local")
    # with no errors the command prints the table placeholder and exits 0 (1 when any)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().splitlines()[-1] == "No data found"


def test_list_import_errors_does_report_a_broken_dag_file(airflow_db, tmp_path):
    """The control for the check above: a broken DAG file next to the examples is reported."""
    for example in ("elastic_training.py", "elastic_rescale_check.py"):
        (tmp_path / example).write_text((EXAMPLE_DAGS / example).read_text())
    (tmp_path / "broken.py").write_text(
        "from airflow.sdk import DAG\nfrom elasticgrid_provider.operators import NoSuchOperator\n"
    )
    result = _airflow(tmp_path, "dags", "list-import-errors", "--local", "--output", "json")
    assert result.returncode == 1, result.stdout + result.stderr
    errors = json.loads(result.stdout.strip().splitlines()[-1])
    assert [Path(error["filepath"]).name for error in errors] == ["broken.py"]
    assert "NoSuchOperator" in errors[0]["error"]


def test_airflow_lists_every_example_dag(airflow_db):
    result = _airflow(EXAMPLE_DAGS, "dags", "list", "--local", "--output", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Failed to load all files" not in result.stderr
    dags = json.loads(result.stdout.strip().splitlines()[-1])
    assert sorted(dag["dag_id"] for dag in dags) == [
        "elastic_fleet",
        "elastic_rescale_check",
        "elastic_training",
    ]
    # elastic_rescale_check may also be registered from tests/dags (tests/test_example_dags.py
    # runs it) in this session's shared DB; elastic_training only ever comes from example_dags
    filelocs = {dag["dag_id"]: Path(dag["fileloc"]) for dag in dags}
    assert filelocs["elastic_training"] == EXAMPLE_DAGS / "elastic_training.py"
