"""StopJobOperator on a real metadata DB with real local iroh-tinker jobs of two parts.

* as a teardown: the training task fails, the teardown still stops every part;
* a second stop has nothing left to stop; a job never launched fails in one sentence;
* ``on_kill`` mid-stop (SIGTERM, then SIGKILL as a supervisor does after its grace): the
  record says ``stopping``, and the next stop finishes it.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from elasticgrid_provider.core.fleet.ledger import job_usage
from elasticgrid_provider.core.launch_spec import LaunchOptions
from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.providers import providers_from_dicts
from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook
from elasticgrid_provider.hooks.grid_ledger import GridLedgerStore
from tests.airflow_support import read_run, run_dag, start_dags_test
from tests.cli.cli_support import run_json
from tests.dag_settings import STUBBORN_RUN, TWO_LOCAL_PROVIDERS
from tests.job_processes import is_alive, job_ranks, rank_pids

pytestmark = pytest.mark.airflow


def _manifest(jobs_root: Path, job: str) -> dict:
    return json.loads((jobs_root / job / "manifest.json").read_text())


def test_the_teardown_stops_every_part_when_the_training_task_fails(airflow_db, jobs_root, capfd):
    result = run_dag("stop_teardown", {"job_name": "torn", "nodes": 3})

    assert result.task_states == {
        "plan": "success",
        "launch": "success",
        "train_checks": "failed",
        "stop": "success",
    }
    assert result.state == "failed"  # the work failed; the teardown did its part
    launched = result.xcom("launch", "job")
    runners = [
        pid for part in ("torn--onprem", "torn--cloud") for pid in rank_pids(jobs_root, part)
    ]
    assert len(runners) == 3
    assert not [pid for pid in runners if is_alive(pid)]
    assert job_ranks("torn") == {}
    report = result.xcom("stop")
    assert [(p["name"], p["engine"], p["nodes"], p["ranks"]) for p in report["parts"]] == [
        ("torn--onprem", "local", 2, "0-1"),
        ("torn--cloud", "local", 1, "2"),
    ]
    assert (report["launch_id"], report["launch_state"], report["job_status"]) == (
        launched["launch_id"],
        "stopped",
        "stopped",
    )
    assert report["released_nodes"] == {"onprem": 2, "cloud": 1}
    reason = f"stopped by task stop_teardown.stop (run {result.run_id})"
    assert (_manifest(jobs_root, "torn")["state"], _manifest(jobs_root, "torn")["down_reason"]) == (
        "stopped",
        reason,
    )
    assert job_usage(GridLedgerStore(jobs_root).snapshot().ledger, "torn") == {}
    out = capfd.readouterr().out
    assert "Stopped job 'torn' (launch " in out
    assert "Job torn was still running when its teardown ran" in out

    again = run_dag("stop_job", {"job_name": "torn"})

    assert again.task_states == {"stop": "success"}
    second = again.xcom("stop")
    assert (second["parts"], second["released_nodes"]) == ([], {})
    assert second["nothing_left"] == f"its launch {launched['launch_id']} is stopped ({reason})"

    ghost = run_dag("stop_job", {"job_name": "ghost"})

    assert ghost.task_states == {"stop": "failed"}
    output = capfd.readouterr()
    assert f"job 'ghost' was never launched under {jobs_root}" in output.out + output.err
    assert not (jobs_root / "ghost").exists()


@pytest.mark.long
def test_a_stop_killed_midway_is_recorded_stopping_and_the_next_stop_finishes_it(
    airflow_db, jobs_root, tmp_path, capsys
):
    planner = GridPlanner(providers=providers_from_dicts(TWO_LOCAL_PROVIDERS))
    manager = ElasticGridHook(jobs_root=str(jobs_root)).launch_manager("stubborn")
    options = LaunchOptions(run=STUBBORN_RUN, recovery={"mode": "none"})
    manager.launch(planner.plan(3), options, startup_grace_s=1)
    ranks = job_ranks("stubborn")
    assert len(ranks) == 3
    onprem_runners = rank_pids(jobs_root, "stubborn--onprem")
    log_path = tmp_path / "dags-test.log"
    with log_path.open("w+") as log:
        process = start_dags_test("stop_dags.py", "stop_job", {"job_name": "stubborn"}, output=log)
        try:
            deadline = time.monotonic() + 90
            # the stop SIGKILLs a part's runners first, then TERMs its ranks and waits for them
            while any(is_alive(pid) for pid in onprem_runners):
                assert process.poll() is None, log_path.read_text()[-3000:]
                assert time.monotonic() < deadline, "the stop did not start"
                time.sleep(0.05)
            time.sleep(0.5)  # the onprem ranks ignore that TERM: the stop waits its grace
            process.send_signal(signal.SIGTERM)  # on_kill
            time.sleep(0.5)
            process.kill()  # the supervisor's SIGKILL, before the stop finished
            process.wait(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        output = log_path.read_text()

    assert "Task killed while stopping job stubborn" in output
    recorded = _manifest(jobs_root, "stubborn")
    assert recorded["state"] == "stopping"  # the record says what happened
    assert recorded["down_reason"].startswith("stopped by task stop_job.stop (run ")
    assert job_ranks("stubborn")  # cut short: ranks are left
    assert read_run("stop_job").task_states["stop"] == "running"  # killed, never finished
    capsys.readouterr()  # the launch's log

    code, report = run_json(capsys, "stop", "stubborn")

    assert code == 0
    assert [part["name"] for part in report["parts"]] == ["stubborn--onprem", "stubborn--cloud"]
    assert report["other_processes"] >= 2  # the onprem ranks, whose runners were gone
    assert report["launch_state"] == "stopped"
    assert report["released_nodes"] == {"onprem": 2, "cloud": 1}
    assert not [pid for pid in ranks if is_alive(pid)]
    assert job_ranks("stubborn") == {}
    assert _manifest(jobs_root, "stubborn")["state"] == "stopped"
