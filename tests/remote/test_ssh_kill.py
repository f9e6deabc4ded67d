"""A launch on SSH hosts SIGKILLed mid-start or in its start-up grace, then retried:
exactly one copy runs (a start cut short is stopped and started again; one with every
rank up is adopted)."""

from __future__ import annotations

import json
import time

import pytest

from tests.airflow_support import run_dag, start_dags_test
from tests.remote.conftest import job_processes
from tests.ssh_hosts import SshTestHosts

pytestmark = [pytest.mark.airflow, pytest.mark.long]

# the setup of part pool-b waits while its hold file exists: the kill lands after pool-a's
# ranks started and before pool-b's do
HOLD_SETUP = "while [ -e /srv/pool/hold-$ELASTICGRID_PART ]; do sleep 0.2; done"


def test_a_sigkill_mid_start_then_a_retry_runs_exactly_one_copy_over_ssh(
    airflow_db, jobs_root, two_pools, tmp_path
):
    job = "halfway"
    conf = {"job_name": job, "nodes": 2, "steps": 100000, "setup": HOLD_SETUP}
    hold = two_pools.pool / f"hold-{job}--pool-b"
    hold.touch()
    log_path = tmp_path / "dags-test.log"
    with log_path.open("w+") as log:
        process = start_dags_test("ssh_dags.py", "ssh_launch_setup", conf, output=log)
        try:
            deadline = time.monotonic() + 120
            while not job_processes(two_pools, 0, job):
                assert process.poll() is None, log_path.read_text()[-3000:]
                assert time.monotonic() < deadline, "pool-a's ranks did not start"
                time.sleep(0.3)
            time.sleep(1.0)  # pool-b's setup is now waiting on the hold file
            first = job_processes(two_pools, 0, job)
            process.kill()
        finally:
            process.kill()
            process.wait(timeout=30)
    intent = json.loads((jobs_root / job / "manifest.json").read_text())
    assert intent["state"] == "starting"
    assert set(first.values()) == {intent["launch_id"]}
    assert job_processes(two_pools, 0, job) == first  # orphans: alive on pool-a's host
    # on pool-b's host only its setup runs (it carries the launch's variables too)
    assert set(job_processes(two_pools, 1, job).values()) <= {intent["launch_id"]}
    hold.unlink()

    retry = run_dag("ssh_launch_setup", conf)

    assert retry.task_states == {"plan": "success", "launch": "success"}
    launch_id = retry.xcom("launch", "job")["launch_id"]
    assert launch_id != intent["launch_id"]
    on_a, on_b = job_processes(two_pools, 0, job), job_processes(two_pools, 1, job)
    # the first launch's processes are gone: everything of the job is the retry's
    assert on_a and on_b and set(on_a.values()) | set(on_b.values()) == {launch_id}
    assert not set(first) & set(on_a)


def _host_processes(hosts: SshTestHosts, job: str) -> dict[str, dict[int, str]]:
    """Every process of ``job`` on each host (by address): pid -> launch id."""
    return {
        address: job_processes(hosts, index, job) for index, address in enumerate(hosts.addresses)
    }


def test_a_retry_adopts_a_start_killed_in_its_grace_over_ssh(
    airflow_db, jobs_root, ssh_pool, tmp_path, capfd, caplog
):
    """SIGKILL in the start-up grace with every remote rank up: the retry confirms the same
    remote processes by their pids, start times and launch id, and starts nothing.

    The killed try's grace (2 minutes) cannot pass before the kill, however loaded the
    machine; the retry is ``ssh_launch``, the same plan and launch (job, placement, run,
    envs, setup) with a grace of 2 s, so it does not wait out two minutes: what it adopts
    is the recorded start, whatever grace the adopting try has."""
    job = "adopt-ssh"
    conf = {"job_name": job, "nodes": 2, "steps": 100000}
    manifest_path = jobs_root / job / "manifest.json"

    def every_rank_up() -> bool:
        if not manifest_path.exists():
            return False
        launch_id = json.loads(manifest_path.read_text())["launch_id"]
        result = jobs_root / job / "specs" / launch_id / "launcher-result.json"
        started = result.exists() and json.loads(result.read_text())["started"]
        on_hosts = _host_processes(ssh_pool, job).values()
        return bool(started) and all(set(found.values()) == {launch_id} for found in on_hosts)

    log_path = tmp_path / "first.log"
    with log_path.open("w+") as log:
        process = start_dags_test("ssh_dags.py", "ssh_launch_long_grace", conf, output=log)
        try:
            deadline = time.monotonic() + 120
            while not every_rank_up():
                assert process.poll() is None, log_path.read_text()[-3000:]
                assert time.monotonic() < deadline, "the ranks did not start on both hosts"
                time.sleep(0.3)
            first = _host_processes(ssh_pool, job)
            process.kill()
            process.wait(timeout=30)
            log.seek(0)
            output = log.read()
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
    assert "every rank is up" not in output  # killed before it confirmed anything
    intent = json.loads(manifest_path.read_text())
    assert intent["state"] == "starting"  # killed in its grace
    capfd.readouterr()

    retry = run_dag("ssh_launch", conf)

    assert retry.task_states == {"plan": "success", "launch": "success"}
    pushed = retry.xcom("launch", "job")
    assert (pushed["launch_id"], pushed["launch_state"]) == (intent["launch_id"], "running")
    assert _host_processes(ssh_pool, job) == first  # the same remote processes: none restarted
    captured = capfd.readouterr()
    text = captured.out + captured.err + caplog.text
    assert f"Adopted job {job}'s launch {intent['launch_id']} (2 nodes)" in text
    # the ranks it confirmed are the recorded remote pids of the first try's processes
    for address, pids in first.items():
        assert any(f"={address}:{pid}" in text for pid in pids), (address, pids)
    assert "resized from" not in text and "Stopped part" not in text
    from iroh_tinker.cloud import JobManager

    JobManager(root=jobs_root).stop(f"{job}--onprem")  # while its hosts are still up
    assert _host_processes(ssh_pool, job) == {address: {} for address in first}
