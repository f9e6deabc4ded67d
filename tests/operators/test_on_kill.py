"""LaunchOperator.on_kill: killing the task stops the job, and the task fails.

Airflow calls ``on_kill`` from the SIGTERM handler that the task runner
installs around ``execute()`` (``task_runner._run_task_and_map_outcome``).
``airflow dags test`` runs its tasks in its own process, so a SIGTERM to that
process is the same signal a worker's task process gets when the supervisor
kills it (user marked it failed, heartbeat lost, pod shutdown). The handler
only calls ``on_kill`` and returns: ``execute()`` carries on, and the wait
loop must then see the stopped job and fail the task instead of passing it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import TESTS, airflow_command

pytestmark = pytest.mark.airflow

DAG_ID = "launch_and_wait_long"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is not alive: it has exited and only waits to be reaped
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def _rank_pids(jobs_root: Path, part: str) -> list[int]:
    state = json.loads((jobs_root / part / "job.json").read_text())
    return [int(pid) for pid in state["pids"].values()]


def _wait_until_running(jobs_root: Path, job: str, process: subprocess.Popen) -> list[str]:
    """The job's part names, once its manifest exists and every part's ranks run."""
    from iroh_tinker.cloud import JobManager

    manager = JobManager(root=jobs_root)
    manifest = jobs_root / job / "manifest.json"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert process.poll() is None, "airflow dags test ended before the job ran"
        if manifest.exists():
            parts = [part["name"] for part in json.loads(manifest.read_text())["parts"]]
            try:
                running = all(manager.status(part).status == "running" for part in parts)
            except KeyError:  # a part not launched yet
                running = False
            if running and all(_alive(pid) for p in parts for pid in _rank_pids(jobs_root, p)):
                return parts
        time.sleep(0.2)
    raise AssertionError(f"job {job} was not running within 90 s")


def _task_state() -> tuple[str, dict[str, str]]:
    """The latest run of the DAG and its task states, as the metadata DB has them."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        run = session.scalars(
            select(DagRun).where(DagRun.dag_id == DAG_ID).order_by(DagRun.id.desc())
        ).first()
        assert run is not None
        states = {
            ti.task_id: str(ti.state)
            for ti in session.scalars(
                select(TaskInstance).where(
                    TaskInstance.dag_id == DAG_ID, TaskInstance.run_id == run.run_id
                )
            )
        }
        return str(run.state), states


def test_killing_the_waiting_task_stops_the_job_and_fails_the_task(airflow_db, jobs_root, tmp_path):
    from iroh_tinker.cloud import JobManager

    # to a file, not a pipe: nobody reads a pipe while the job starts, and a full one blocks
    log = (tmp_path / "dags-test.log").open("w+")
    process = subprocess.Popen(
        [
            *airflow_command(),
            "dags",
            "test",
            DAG_ID,
            "--conf",
            json.dumps({"job_name": "killed", "nodes": 3}),
            "--dagfile-path",
            str(TESTS / "dags" / "kill_dags.py"),
        ],
        env={**os.environ, "PYTHONPATH": str(TESTS.parent)},
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    with log:
        try:
            parts = _wait_until_running(jobs_root, "killed", process)
            assert parts == ["killed--onprem", "killed--cloud"]
            pids = [pid for part in parts for pid in _rank_pids(jobs_root, part)]
            assert len(pids) == 3
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        log.seek(0)
        output = log.read()

    manager = JobManager(root=jobs_root)
    assert {part: manager.status(part).status for part in parts} == {
        part: "stopped" for part in parts
    }
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in pids if _alive(pid)], "rank processes outlived on_kill"

    assert "Task killed: stopping job killed." in output
    assert "Stopped part killed--onprem." in output and "Stopped part killed--cloud." in output
    assert "job 'killed' was stopped before it finished" in output
    run_state, task_states = _task_state()
    assert task_states == {"plan": "success", "launch": "failed"}
    assert run_state == "failed"
    assert process.returncode != 0
