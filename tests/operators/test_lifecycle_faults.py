"""Nothing is lost between a stop and a start: kills and retries of real task runs.

Real ``airflow dags test`` processes SIGKILLed at the instants named, real
local iroh-tinker jobs (a full jobs folder: ``tests/hooks/test_launch_manager.py``). The DAGs are in
``tests/dags/kill_dags.py``; :class:`tests.fake_engines.HeldStopEngine`
holds a part's ``stop`` after its ranks are gone, so a resize can be killed
exactly between the stop of the old launch and the start of the new one.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.airflow_support import run_dag, start_dags_test
from tests.fake_engines import HOLD_STOP
from tests.job_processes import job_ranks, rank_pids

pytestmark = [pytest.mark.airflow, pytest.mark.long]


def _manifest(jobs_root: Path, job: str) -> dict:
    return json.loads((jobs_root / job / "manifest.json").read_text())


def _text(capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> str:
    captured = capfd.readouterr()
    return captured.out + captured.err + caplog.text


def _wait_for(condition, what: str, process: subprocess.Popen | None = None, timeout=90.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert process is None or process.poll() is None, f"airflow dags test ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.1)


def _sigkill(process: subprocess.Popen, log) -> str:
    """SIGKILL ``airflow dags test`` (no on_kill, no clean-up) and return its output."""
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    log.seek(0)
    return log.read()


def test_a_resize_killed_between_the_stop_and_the_start_leaves_a_record_the_check_reports(
    airflow_db, jobs_root, tmp_path, capfd, caplog
):
    """SIGKILL once the old launch's ranks are gone and before the new launch is recorded:
    the manifest says the old launch was being stopped, the check fails saying what happened
    (never "job_ended"), and the retry starts the job once."""
    conf = {"job_name": "cut", "nodes": 2}
    assert run_dag("launch_held_stop", conf).task_states["launch"] == "success"
    old = _manifest(jobs_root, "cut")
    part = jobs_root / "cut--held"
    (part / HOLD_STOP).write_text("")
    try:
        log_path = tmp_path / "resize.log"
        with log_path.open("w+") as log:
            process = start_dags_test(
                "kill_dags.py", "launch_held_stop", {**conf, "nodes": 3}, output=log
            )
            try:
                _wait_for(lambda: (part / "stop-held").exists(), "held stop", process)
                assert job_ranks("cut") == {}  # the old launch is stopped, nothing new started
                _sigkill(process, log)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
    finally:
        (part / HOLD_STOP).unlink(missing_ok=True)

    manifest = _manifest(jobs_root, "cut")
    assert (manifest["launch_id"], manifest["state"]) == (old["launch_id"], "stopping")
    assert manifest["down_reason"].startswith("being replaced by launch ")
    capfd.readouterr()
    check = run_dag("scale_check_patient", {"job_name": "cut"})
    assert check.task_states == {"scale_check": "failed"}
    text = _text(capfd, caplog)
    assert (
        f"JobFailedError: job 'cut' was cut short while its launch {old['launch_id']} was being "
        "stopped (being replaced by launch " in text
    )
    assert "no rank is left, so there is nothing to scale; launch it again with LaunchOperator" in (
        text
    )
    assert "job_ended" not in text

    retry = run_dag("launch_held_stop", {**conf, "nodes": 3})
    assert retry.task_states["launch"] == "success"
    job = retry.xcom("launch", "job")
    assert (job["nodes"], job["launch_state"]) == (3, "running")
    assert set(job_ranks("cut").values()) == {job["launch_id"]}
    assert len(job_ranks("cut")) == 3


def test_a_job_stopped_outside_elasticgrid_fails_the_check_instead_of_ending_it(
    airflow_db, jobs_root, capfd, caplog
):
    """Every part stopped while the launch is recorded running: the job vanished, and the
    check says so instead of "hold ... job_ended ... nothing to scale"."""
    from iroh_tinker.cloud import JobManager

    run_dag("launch_sleeping", {"job_name": "gone", "nodes": 2})
    launch_id = _manifest(jobs_root, "gone")["launch_id"]
    JobManager(root=jobs_root).stop("gone--onprem")  # iroh-tinker's own stop, not the hook's
    _wait_for(lambda: not job_ranks("gone"), "the ranks to go")
    capfd.readouterr()

    check = run_dag("scale_check_patient", {"job_name": "gone"})

    assert check.task_states == {"scale_check": "failed"}
    text = _text(capfd, caplog)
    assert (
        f"job 'gone' has no rank left, yet its launch {launch_id} is recorded running: its "
        "parts were stopped outside elasticgrid or never started" in text
    )
    assert check.xcom("scale_check") is None  # no job_ended record


def test_a_retry_adopts_a_start_killed_in_its_grace_with_every_rank_up(
    airflow_db, jobs_root, tmp_path, capfd, caplog
):
    """SIGKILL in the start-up grace, every part started and every rank up: the launch is
    left ``starting``; the retry confirms it and attaches, restarting nothing."""
    conf = {"job_name": "adopt", "nodes": 3}
    log_path = tmp_path / "first.log"
    with log_path.open("w+") as log:
        process = start_dags_test("kill_dags.py", "launch_long_grace", conf, output=log)
        try:

            def all_up() -> bool:
                manifest = jobs_root / "adopt" / "manifest.json"
                if not manifest.exists():
                    return False
                launch_id = json.loads(manifest.read_text())["launch_id"]
                result = jobs_root / "adopt" / "specs" / launch_id / "launcher-result.json"
                ranks = job_ranks("adopt")
                return (
                    result.exists()
                    and len(json.loads(result.read_text())["started"]) == 2
                    and len(ranks) == 3
                )

            _wait_for(all_up, "every rank up", process)
            assert _manifest(jobs_root, "adopt")["state"] == "starting"  # still in its grace
            first = job_ranks("adopt")
            output = _sigkill(process, log)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert "every rank is up" not in output  # killed before it confirmed anything
    intent = _manifest(jobs_root, "adopt")
    assert intent["state"] == "starting"
    capfd.readouterr()

    retry = run_dag("launch_long_grace", conf)

    assert retry.task_states == {"plan": "success", "launch": "success"}
    job = retry.xcom("launch", "job")
    assert (job["launch_id"], job["launch_state"]) == (intent["launch_id"], "running")
    assert job_ranks("adopt") == first  # the same processes: nothing restarted
    recorded = [
        pid for part in ("adopt--onprem", "adopt--cloud") for pid in rank_pids(jobs_root, part)
    ]
    assert sorted(recorded) == sorted(first)
    text = _text(capfd, caplog)
    assert f"Adopted job adopt's launch {intent['launch_id']} (3 nodes)" in text
    assert "resized from" not in text and "Stopped part" not in text
