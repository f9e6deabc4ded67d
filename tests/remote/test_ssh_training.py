"""A training job on SSH hosts that share no folder with Airflow, driven by real task runs.

Two namespace hosts (``tests/ssh_hosts.py``) form an on-prem pool: each sees a
pool folder at ``/srv/pool`` (the provider's ``shared_dir``), none sees the
worker's jobs root. The grid comes from the ``elasticgrid_ssh`` connection.
"""

from __future__ import annotations

import json
import secrets
import threading

import pytest

from elasticgrid_provider.core.providers import ENGINE_REFERENCES
from tests.airflow_support import run_dag
from tests.ssh_hosts import POOL_MOUNT, SshTestHosts

pytestmark = [pytest.mark.airflow, pytest.mark.long]

SSH_REFERENCE = ENGINE_REFERENCES["ssh"]


def _watch_command_lines(hosts: SshTestHosts, stop: threading.Event, seen: list[str]) -> None:
    """Collect every host's ``ps`` output until ``stop`` is set."""
    while not stop.is_set():
        for index in range(hosts.count):
            seen.append(hosts.run(index, "ps -eo args", timeout=10).stdout)
        stop.wait(0.2)


def test_a_job_grows_from_one_ssh_host_to_two_and_resumes_from_its_checkpoint(
    airflow_db, jobs_root, ssh_pool
):
    token = secrets.token_hex(12)
    seen: list[str] = []
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_command_lines, args=(ssh_pool, stop, seen))
    watcher.start()
    try:
        result = run_dag("ssh_training", {"job_name": "remote", "steps": 80, "token": token})
    finally:
        stop.set()
        watcher.join()

    assert set(result.task_states.values()) == {"success"}, result.task_states
    launched = result.xcom("launch", "job")
    assert (launched["nodes"], launched["engines"]) == (1, [SSH_REFERENCE])
    decision = result.xcom("scale_check")
    assert (decision["action"], decision["current_nodes"], decision["target_nodes"]) == (
        "scale_up",
        1,
        2,
    )
    assert decision["signals"]["samples"] >= 3  # read from rank 0's log on its host
    finished = result.xcom("relaunch")
    assert (finished["status"], finished["nodes"]) == ("done", 2)

    from iroh_tinker.cloud import JobManager

    state = JobManager(root=jobs_root).load("remote--onprem")
    assert [node["host"] for node in state.nodes] == ssh_pool.hosts  # rank 0 on A, rank 1 on B
    assert state.pids == {}  # remote pids are never taken for local ones

    # the checkpoint lives in the pool folder the hosts share, and the relaunch resumed from it
    progress = json.loads(
        (ssh_pool.pool / "eg" / "remote" / "shared" / "checkpoint" / "progress.json").read_text()
    )
    assert (progress["completed_steps"], progress["world_size"]) == (80, 2)
    remote = "~/elasticgrid/remote--onprem/.elasticgrid"
    rank0_log = ssh_pool.run(0, f"cat {remote}/logs/rank_0.log").stdout
    resumed = [line for line in rank0_log.splitlines() if "resuming at step" in line]
    assert resumed and "with world size 2" in resumed[-1], rank0_log
    assert "resuming at step" not in ssh_pool.run(1, f"cat {remote}/logs/rank_1.log").stdout

    # every step logged on the host, and each once
    steps = [
        json.loads(line)["step"]
        for line in ssh_pool.run(0, f"cat {remote}/steps.jsonl").stdout.splitlines()
    ]
    assert steps == sorted(set(steps)) and steps[-1] == 79

    # the hosts never saw the jobs root, and the token was on no command line and no file
    assert (jobs_root / "remote" / "manifest.json").exists()
    assert ssh_pool.run(0, f"test -e {jobs_root}/remote/manifest.json").returncode != 0
    assert seen and not [listing for listing in seen if token in listing]
    for index in range(ssh_pool.count):
        found = ssh_pool.run(index, f"grep -rl {token} ~ {POOL_MOUNT} || true").stdout
        assert found.strip() == "", found
