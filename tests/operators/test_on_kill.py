"""LaunchOperator.on_kill: killing the task stops the job, and the task fails.

Airflow calls ``on_kill`` from the SIGTERM handler that the task runner
installs around ``execute()`` (``task_runner._run_task_and_map_outcome``).
``airflow dags test`` runs its tasks in its own process, so a SIGTERM to that
process is the same signal a worker's task process gets when the supervisor
kills it (user marked it failed, heartbeat lost, pod shutdown). The handler
only calls ``on_kill`` and returns: ``execute()`` carries on, and the wait
loop must then see the stopped job and fail the task instead of passing it.

A stop from outside (a user's ``elasticgrid stop``, a stop task) fails the waiting task
without a retry: the retry would start the job the user stopped again.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.airflow_support import (
    kill_on_exit,
    read_run,
    run_dag,
    sigterm_when,
    start_dags_test,
    wait_for,
)
from tests.job_processes import is_alive, job_ranks, rank_pids, stop_job, stop_job_processes

pytestmark = [pytest.mark.airflow, pytest.mark.long]

DAG_ID = "launch_and_wait_long"

# how long `airflow dags test` may take to reach a point (it ends as soon as it does): a
# start-up takes seconds on an idle machine and minutes on a saturated one
STARTUP_S = 240.0


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
    deadline = time.monotonic() + STARTUP_S
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
    raise AssertionError(f"job {job} was not running within {STARTUP_S} s")


def test_killing_the_waiting_task_stops_the_job_and_fails_the_task(airflow_db, jobs_root, tmp_path):
    from iroh_tinker.cloud import JobManager

    log_path = tmp_path / "dags-test.log"
    log = log_path.open("w+")
    process = start_dags_test(
        "kill_dags.py", DAG_ID, {"job_name": "killed", "nodes": 3}, output=log
    )
    with log:
        with kill_on_exit(process):
            parts = _wait_until_running(jobs_root, "killed", process, log_path)
            assert parts == ["killed--onprem", "killed--cloud"]
            pids = [pid for part in parts for pid in rank_pids(jobs_root, part)]
            assert len(pids) == 3
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=STARTUP_S)
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
        process = start_dags_test(
            "kill_dags.py", "launch_slow_provision", {"job_name": "slow", "nodes": 2}, output=log
        )
        # the manifest is written just before the first part provisions
        output = sigterm_when(
            process, log, manifest.exists, "manifest", timeout=STARTUP_S, grace=STARTUP_S
        )

    assert "Task killed while launching job slow: cancelling the launch." in output
    assert (
        "job 'slow' could not start: the launch was cancelled (the task was killed)" in output
        or "job 'slow' was stopped: the task was killed while it launched" in output
    )
    with contextlib.suppress(KeyError):  # killed while it provisioned: never started, or stopped
        assert JobManager(root=jobs_root).status("slow--onprem").status == "stopped"
    assert job_ranks("slow") == {}
    assert read_run("launch_slow_provision").task_states == {"plan": "success", "launch": "failed"}


def _finish(process: subprocess.Popen, log) -> str:
    with kill_on_exit(process):
        process.wait(timeout=STARTUP_S)
    log.seek(0)
    return log.read()


def test_a_kill_while_waiting_for_the_lock_leaves_the_running_job_alone(
    airflow_db, jobs_root, tmp_path
):
    """The killed task had started nothing: the job it waited to resize keeps running, and
    once the lock is free the killed task starts nothing either."""
    from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook

    run_dag("launch_sleeping", {"job_name": "waited", "nodes": 2})
    ranks = job_ranks("waited")
    manifest = (jobs_root / "waited" / "manifest.json").read_text()
    assert len(ranks) == 2
    log_path = tmp_path / "dags-test.log"
    with log_path.open("w+") as log:
        with ElasticGridHook(jobs_root=str(jobs_root)).job_store.job_lock("waited"):
            process = start_dags_test(
                "kill_dags.py", DAG_ID, {"job_name": "waited", "nodes": 3}, output=log
            )
            wait_for(
                lambda: "Waiting for the lock of job waited." in log_path.read_text(),
                "lock wait",
                process,
                STARTUP_S,
            )
            process.send_signal(signal.SIGTERM)
            wait_for(
                lambda: "was not started by this task" in log_path.read_text(),
                "on_kill",
                process,
                STARTUP_S,
            )
            assert job_ranks("waited") == ranks  # on_kill stopped nothing
        output = _finish(process, log)  # the lock is free: the killed launch goes on?

    assert "the task was killed while it waited for the job's lock" in output
    assert job_ranks("waited") == ranks
    assert (jobs_root / "waited" / "manifest.json").read_text() == manifest
    assert read_run(DAG_ID).task_states == {"plan": "success", "launch": "failed"}


def test_a_kill_in_the_middle_of_a_start_leaves_no_rank(airflow_db, jobs_root, tmp_path):
    """SIGTERM while the engine has started the ranks but not returned (iroh-tinker has
    recorded no pid yet): on_kill finds the ranks by their launch id and stops them."""
    log_path = tmp_path / "dags-test.log"
    with log_path.open("w+") as log:
        process = start_dags_test(
            "kill_dags.py",
            "launch_hanging_start",
            {"job_name": "hung", "nodes": 2, "hang": 600},
            output=log,
        )
        try:
            wait_for(lambda: len(job_ranks("hung")) == 2, "2 ranks", process, STARTUP_S)
            assert not (jobs_root / "hung--hang" / "job.json").exists()  # nothing recorded
            pids = list(job_ranks("hung"))
            process.send_signal(signal.SIGTERM)
        finally:
            output = _finish(process, log)

    assert "Task killed while launching job hung: cancelling the launch." in output
    assert "job 'hung' could not start: the launch was cancelled (the task was killed)" in output
    assert not [pid for pid in pids if is_alive(pid)]
    assert job_ranks("hung") == {}
    manifest = json.loads((jobs_root / "hung" / "manifest.json").read_text())
    assert manifest["state"] == "down"
    assert read_run("launch_hanging_start").task_states == {"plan": "success", "launch": "failed"}


def test_a_sigkill_in_the_middle_of_a_start_then_a_retry_runs_exactly_one_copy(
    airflow_db, jobs_root, tmp_path
):
    """SIGKILL (no on_kill) while the engine's start hangs: the ranks it started are
    recorded nowhere but in the launch record; the retry stops them and starts once."""
    log_path = tmp_path / "dags-test.log"
    conf = {"job_name": "twice", "nodes": 3}
    try:
        with log_path.open("w+") as log:
            process = start_dags_test(
                "kill_dags.py", "launch_hanging_start", {**conf, "hang": 600}, output=log
            )
            try:
                wait_for(lambda: len(job_ranks("twice")) == 3, "3 ranks", process, STARTUP_S)
                first = job_ranks("twice")
                process.kill()
            finally:
                _finish(process, log)
        time.sleep(0.5)
        assert job_ranks("twice") == first  # orphans: alive, unrecorded
        intent = json.loads((jobs_root / "twice" / "manifest.json").read_text())
        assert intent["state"] == "starting"
        assert set(first.values()) == {intent["launch_id"]}

        retry = run_dag("launch_hanging_start", conf)

        assert retry.task_states["launch"] == "success"
        job = retry.xcom("launch", "job")
        assert job["launch_id"] != intent["launch_id"] and job["launch_state"] == "running"
        assert not [pid for pid in first if is_alive(pid)]
        ranks = job_ranks("twice")
        assert len(ranks) == 3  # exactly one copy: 3 ranks, all of the retry's launch
        assert set(ranks.values()) == {job["launch_id"]}
        assert sorted(rank_pids(jobs_root, "twice--hang")) == sorted(ranks)
    finally:
        stop_job_processes("twice")


def test_killing_a_task_that_attached_leaves_the_job_running(airflow_db, jobs_root, tmp_path):
    """The job was launched by another run; this task only attached and waited on it."""
    # the same run command as the `airflow dags test` below (tests/dag_settings.py PYTHON)
    first = run_dag("launch_sleeping", {"job_name": "shared", "nodes": 3})
    assert first.task_states == {"plan": "success", "launch": "success"}
    ranks = job_ranks("shared")
    assert len(ranks) == 3
    log_path = tmp_path / "dags-test.log"
    with log_path.open("w+") as log:
        process = start_dags_test(
            "kill_dags.py", DAG_ID, {"job_name": "shared", "nodes": 3}, output=log
        )
        try:
            wait_for(
                lambda: "attached, started nothing" in log_path.read_text(),
                "attach",
                process,
                STARTUP_S,
            )
            process.send_signal(signal.SIGTERM)
        finally:
            output = _finish(process, log)

    assert "was not started by this task" in output
    assert "which it attached to and left running" in output
    assert job_ranks("shared") == ranks
    assert read_run(DAG_ID).task_states == {"plan": "success", "launch": "failed"}


def test_on_kill_stops_the_launch_through_the_launch_manager_the_operator_holds(
    airflow_db, jobs_root
):
    """``on_kill`` calls ``stop()`` on the LaunchManager the operator launched with: the launch
    it started is stopped by its id and recorded down. Another operator that attached to the
    job holds a manager that owns no launch, and its ``on_kill`` leaves the job running."""
    from elasticgrid_provider.core.planner import GridPlanner
    from elasticgrid_provider.core.providers import providers_from_dicts
    from elasticgrid_provider.hooks.launch_manager import LaunchAction, StopAction
    from elasticgrid_provider.hooks.launch_stop import KILLED_REASON
    from elasticgrid_provider.operators.launch import LaunchOperator
    from tests.dag_settings import SLEEPING_RUN, TWO_LOCAL_PROVIDERS

    placement = GridPlanner(providers=providers_from_dicts(TWO_LOCAL_PROVIDERS)).plan(2)

    def operator(task_id: str) -> LaunchOperator:
        return LaunchOperator(
            task_id=task_id,
            job_name="held",
            run=SLEEPING_RUN,
            placement=placement.model_dump(),
            recovery={"mode": "none"},
            startup_grace_s=1,
        )

    launching, attaching = operator("launch"), operator("attach")
    try:
        _, launched = launching._launch()
        _, attached = attaching._launch()
        assert (launched.action, attached.action) == (LaunchAction.LAUNCHED, LaunchAction.ATTACHED)
        ranks = job_ranks("held")
        assert len(ranks) == 2
        manager = launching.launch_manager
        assert manager is launching.launch_manager  # the one the operator holds
        assert manager.launch_id == launched.snapshot.manifest.launch_id
        assert attaching.launch_manager.launch_id is None

        assert attaching.launch_manager.stop_action is StopAction.NOTHING
        attaching.on_kill()
        assert job_ranks("held") == ranks  # an attached job keeps running

        assert manager.stop_action is StopAction.STOPPED
        launching.on_kill()
        deadline = time.monotonic() + 10
        while any(is_alive(pid) for pid in ranks) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in ranks if is_alive(pid)], "rank processes outlived on_kill"
        manifest = json.loads((jobs_root / "held" / "manifest.json").read_text())
        assert (manifest["launch_id"], manifest["state"], manifest["down_reason"]) == (
            manager.launch_id,
            "down",
            KILLED_REASON,
        )
    finally:
        stop_job_processes("held")


def test_a_stop_from_outside_fails_the_waiting_launch_without_a_retry(
    airflow_db, jobs_root, tmp_path
):
    dag_id, job = "launch_and_wait_with_a_retry", "stopped-outside"
    log_path = tmp_path / "dags-test.log"
    log = log_path.open("w+")
    process = start_dags_test("kill_dags.py", dag_id, {"job_name": job, "nodes": 3}, output=log)
    with log:
        with kill_on_exit(process):
            parts = _wait_until_running(jobs_root, job, process, log_path)
            launch_id = json.loads((jobs_root / job / "manifest.json").read_text())["launch_id"]
            stop_job(jobs_root, job, reason="stopped by a user")
            process.wait(timeout=STARTUP_S)
        log.seek(0)
        output = log.read()

    assert (
        f"job '{job}' was stopped before it finished (stopped by a user), so this task fails "
        "without a retry: a retry would start the job again"
    ) in output
    run = read_run(dag_id)
    assert run.task_states == {"plan": "success", "launch": "failed"}
    manifest = json.loads((jobs_root / job / "manifest.json").read_text())
    assert (manifest["launch_id"], manifest["state"]) == (launch_id, "stopped")
    assert job_ranks(job) == {}, "a retry started the stopped job again"
    assert len(parts) == 2
