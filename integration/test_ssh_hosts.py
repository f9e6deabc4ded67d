"""Training on SSH hosts through the real scheduler, Celery workers and Postgres.

The hosts cannot see the deployment's folder, so neither the jobs root nor the
workers' DAG copies: the step samples reach the sensor over SSH, the checkpoint
and the rendezvous live in the pool folder the hosts share.
"""

from __future__ import annotations

import json
import secrets
import threading

from integration.deployment import Deployment

REMOTE = "~/elasticgrid/{part}/.elasticgrid"


def test_a_job_on_ssh_hosts_grows_from_one_host_to_two_through_the_scheduler(
    deployment: Deployment,
):
    hosts = deployment.ssh_hosts
    token = secrets.token_hex(12)
    seen: list[str] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.extend(hosts.run(i, "ps -eo args", timeout=10).stdout for i in range(hosts.count))
            stop.wait(0.5)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        run_id = deployment.trigger("it_ssh_training", {"job_name": "it-ssh", "token": token})
        state = deployment.wait_for_run("it_ssh_training", run_id, timeout=480)
    finally:
        stop.set()
        watcher.join()
    states = deployment.task_states("it_ssh_training", run_id)
    assert state == "success", (states, deployment.diagnostics())
    decision = deployment.xcom("it_ssh_training", run_id, "scale_check")
    assert (decision["action"], decision["current_nodes"], decision["target_nodes"]) == (
        "scale_up",
        1,
        2,
    )
    finished = deployment.xcom("it_ssh_training", run_id, "relaunch")
    assert (finished["status"], finished["nodes"]) == ("done", 2)
    job = json.loads((deployment.jobs_root / "it-ssh--onprem" / "job.json").read_text())
    assert [node["host"] for node in job["nodes"]] == hosts.hosts
    remote = REMOTE.format(part="it-ssh--onprem")
    rank0 = hosts.run(0, f"cat {remote}/logs/rank_0.log").stdout
    assert "with world size 2" in rank0 and "resuming at step" in rank0, rank0
    steps = [
        json.loads(line)["step"]
        for line in hosts.run(0, f"cat {remote}/steps.jsonl").stdout.splitlines()
    ]
    assert steps == sorted(set(steps)) and steps[-1] == 79
    assert seen and not [listing for listing in seen if token in listing]
    for index in range(hosts.count):
        assert hosts.run(index, f"grep -rl {token} ~ /srv/pool || true").stdout.strip() == ""
