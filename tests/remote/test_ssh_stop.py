"""``elasticgrid stop`` of a job on SSH hosts: two parts (two pools), nothing left on any host."""

from __future__ import annotations

import json

import pytest

from elasticgrid_provider.core.launch_spec import LaunchOptions
from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook
from tests.cli.cli_support import run_json
from tests.dag_settings import SLEEPING_RUN, TRAIN
from tests.dags.ssh_dags import SSH_CONN
from tests.remote.conftest import job_processes

pytestmark = [pytest.mark.airflow]


def test_a_stop_leaves_no_process_of_the_job_on_any_host(jobs_root, two_pools, capsys):
    hook = ElasticGridHook(SSH_CONN)
    options = LaunchOptions(run=SLEEPING_RUN, workdir=str(TRAIN.parent), recovery={"mode": "none"})
    hook.launch_manager("afar").launch(hook.get_planner().plan(2), options, startup_grace_s=1)
    assert job_processes(two_pools, 0, "afar") and job_processes(two_pools, 1, "afar")
    capsys.readouterr()  # the launch's log

    code, report = run_json(capsys, "stop", "afar", "--conn-id", SSH_CONN)

    assert code == 0
    assert [(p["name"], p["provider"], p["engine"], p["ranks"]) for p in report["parts"]] == [
        ("afar--pool-a", "pool-a", "ssh", "0"),
        ("afar--pool-b", "pool-b", "ssh", "1"),
    ]
    assert report["launch_state"] == "stopped"
    assert job_processes(two_pools, 0, "afar") == {}
    assert job_processes(two_pools, 1, "afar") == {}
    manifest = json.loads((jobs_root / "afar" / "manifest.json").read_text())
    assert manifest["state"] == "stopped"

    code, again = run_json(capsys, "stop", "afar", "--jobs-root", str(jobs_root))

    assert code == 0 and again["parts"] == []
    assert again["nothing_left"].startswith(f"its launch {manifest['launch_id']} is stopped")
