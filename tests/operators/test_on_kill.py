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

from tests.airflow_support import read_run
from tests.conftest import TESTS, airflow_command
from tests.job_processes import is_alive, rank_pids

pytestmark = pytest.mark.airflow

DAG_ID = "launch_and_wait_long"


def _wait_until_running(
    jobs_root: Path, job: str, process: subprocess.Popen, log: Path
) -> list[str]:
    """The job's part names, once every part's ranks run and the task is waiting on them.

    The task logs its parts after the launch returned and it took the job as its
    own; only from then on does on_kill have a job to stop.
    """
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
            waiting = f"Part {parts[-1]}: " in log.read_text()
            if (
                running
                and waiting
                and all(is_alive(pid) for p in parts for pid in rank_pids(jobs_root, p))
            ):
                return parts
        time.sleep(0.2)
    raise AssertionError(f"job {job} was not running within 90 s")


def _start_dags_test(dag_id: str, conf: dict, log) -> subprocess.Popen:
    """``airflow dags test`` of a DAG in kill_dags.py, its output going to ``log``.

    A file, not a pipe: nobody reads a pipe while the job starts, and a full one blocks.
    """
    return subprocess.Popen(
        [
            *airflow_command(),
            "dags",
            "test",
            dag_id,
            "--conf",
            json.dumps(conf),
            "--dagfile-path",
            str(TESTS / "dags" / "kill_dags.py"),
        ],
        env={**os.environ, "PYTHONPATH": str(TESTS.parent)},
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_killing_the_waiting_task_stops_the_job_and_fails_the_task(airflow_db, jobs_root, tmp_path):
    from iroh_tinker.cloud import JobManager

    log_path = tmp_path / "dags-test.log"
    log = log_path.open("w+")
    process = _start_dags_test(DAG_ID, {"job_name": "killed", "nodes": 3}, log)
    with log:
        try:
            parts = _wait_until_running(jobs_root, "killed", process, log_path)
            assert parts == ["killed--onprem", "killed--cloud"]
            pids = [pid for part in parts for pid in rank_pids(jobs_root, part)]
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
    while any(is_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in pids if is_alive(pid)], "rank processes outlived on_kill"

    assert "Task killed: stopping job killed." in output
    assert "Stopped part killed--onprem." in output and "Stopped part killed--cloud." in output
    assert "job 'killed' was stopped before it finished" in output
    run = read_run(DAG_ID)
    assert run.task_states == {"plan": "success", "launch": "failed"}
    assert run.state == "failed"
    assert process.returncode != 0


def test_a_kill_during_the_launch_stops_the_job_once_it_started(airflow_db, jobs_root, tmp_path):
    """SIGTERM while a provider still provisions: on_kill cancels the launch, which
    holds the job's lock; no part is left running and the task fails."""
    from iroh_tinker.cloud import JobManager

    log_path = tmp_path / "dags-test.log"
    manifest = jobs_root / "slow" / "manifest.json"
    with log_path.open("w+") as log:
        process = _start_dags_test("launch_slow_provision", {"job_name": "slow", "nodes": 2}, log)
        try:
            deadline = time.monotonic() + 60
            while not manifest.exists():  # written just before the first part provisions
                assert process.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        log.seek(0)
        output = log.read()

    assert "Task killed while launching job slow: cancelling the launch." in output
    assert (
        "job 'slow' could not start: the launch was cancelled (the task was killed)" in output
        or "job 'slow' was stopped: the task was killed while it launched" in output
    )
    assert JobManager(root=jobs_root).status("slow--onprem").status == "stopped"
    assert not [pid for pid in rank_pids(jobs_root, "slow--onprem") if is_alive(pid)]
    assert read_run("launch_slow_provision").task_states == {"plan": "success", "launch": "failed"}
