"""A launch on SSH hosts SIGKILLed mid-start, then retried: exactly one copy runs."""

from __future__ import annotations

import json
import time

import pytest

from tests.airflow_support import run_dag, start_dags_test
from tests.remote.conftest import job_processes

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
