"""A training host cut off mid-run is a lost part: recovered on another pool, from the checkpoint."""

from __future__ import annotations

import json
import time

import pytest

from tests.airflow_support import run_dag
from tests.remote.conftest import job_processes
from tests.ssh_hosts import SshTestHosts

pytestmark = [pytest.mark.airflow, pytest.mark.long]

REMOTE_LOGS = "~/elasticgrid/{part}/.elasticgrid"


def _steps_logged(hosts: SshTestHosts, index: int, part: str) -> int:
    listing = hosts.run(index, f"cat {REMOTE_LOGS.format(part=part)}/steps.jsonl 2>/dev/null")
    return len(listing.stdout.splitlines())


def test_a_host_cut_off_mid_run_is_recovered_on_another_pool_from_the_checkpoint(
    airflow_db, jobs_root, two_pools
):
    conf = {"job_name": "cut", "nodes": 1, "steps": 120}
    launched = run_dag("ssh_launch", conf)
    assert launched.xcom("launch", "job")["parts"][0]["provider"] == "pool-a"
    deadline = time.monotonic() + 60
    while _steps_logged(two_pools, 0, "cut--pool-a") < 5:
        assert time.monotonic() < deadline, "the job logged no steps on pool-a"
        time.sleep(0.5)
    two_pools.cut(0)
    cut_at = time.monotonic()

    result = run_dag("ssh_recovery", conf)

    assert result.task_states == {
        "scale_check": "success",
        "plan": "success",
        "relaunch": "success",
    }
    decision = result.xcom("scale_check")
    assert decision["rule"] == "recover", decision
    (lost,) = decision["lost"]
    assert lost["provider"] == "pool-a"
    assert f"{two_pools.hosts[0]} unreachable" in lost["cause"]
    finished = result.xcom("relaunch")
    assert finished["status"] == "done"
    assert [part["provider"] for part in finished["parts"]] == ["pool-b"]
    rank0 = two_pools.run(1, f"cat {REMOTE_LOGS.format(part='cut--pool-b')}/logs/rank_0.log").stdout
    assert "resuming at step" in rank0, rank0  # from the checkpoint pool-a's rank committed
    progress = json.loads(
        (two_pools.pool / "eg" / "cut" / "shared" / "checkpoint" / "progress.json").read_text()
    )
    assert progress["completed_steps"] == 120
    # the cut-off rank trained on, and was fenced at its first commit after the relaunch
    two_pools.restore(0)
    orphan = two_pools.run(0, f"cat {REMOTE_LOGS.format(part='cut--pool-a')}/logs/rank_0.log")
    assert "now belongs to launch" in orphan.stdout, orphan.stdout[-2000:]
    assert job_processes(two_pools, 0, "cut") == {}
    assert time.monotonic() - cut_at < 120
