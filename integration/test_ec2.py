"""Training on fake EC2 VMs through the real scheduler, Celery workers and Postgres.

A moto server (in this process) is the EC2 API; the Celery workers reach it through the
AWS connection's ``endpoint_url``. Its instances boot as network-namespace SSH hosts
(``tests/ec2_hosts.py``) that cannot see the deployment's folder. The connections are
created the way a user does, in the metadata database through the REST API: the AWS
connection ``it_aws``, the SSH connection ``it_ec2_key`` holding the key pair's private
key, and the ``elasticgrid_ec2`` grid. So every one of them is read through the task's
supervisor, and the launch's detached launcher process (which has no way to read Airflow
connections) must start the instances with what its task resolved and handed over.
"""

from __future__ import annotations

import json
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from integration.deployment import Deployment, wait_until
from tests.ec2_hosts import REGION, FakeEc2, assert_nothing_left, watching

SHARED_DIR = "/srv/pool/eg"
AWS_CONN = "it_aws"
KEY_CONN = "it_ec2_key"
DAG_ID = "it_ec2_training"
SECRET_KEY = secrets.token_hex(20)


@pytest.fixture(scope="module")
def fake_ec2(deployment: Deployment) -> Iterator[FakeEc2]:
    """Fake EC2 VMs as the ``elasticgrid_ec2`` grid's provider ``aws`` (spot, 2 instances),
    its connections created through the REST API and deleted after the module."""
    pool = Path(tempfile.mkdtemp(prefix="elasticgrid-ec2-pool-"))
    created: list[str] = []
    try:
        with FakeEc2(hide=[deployment.home], pool=pool, poll_s=0.2, set_connection=False) as ec2:
            params = {k: v for k, v in ec2.params(shared_dir=SHARED_DIR).items() if k != "ssh_key"}
            provider = {
                "name": "aws",
                "engine": "ec2",
                "region": REGION,
                "max_nodes": 2,
                "cost_per_node_hour": 1.0,
                "spot": True,
                "params": {**params, "aws_conn_id": AWS_CONN, "ssh_conn_id": KEY_CONN},
            }
            grid = {"jobs_root": str(deployment.jobs_root), "providers": [provider]}
            aws = {**ec2.connection, "password": SECRET_KEY}  # moto takes any key
            connections = [
                {
                    "connection_id": AWS_CONN,
                    "conn_type": "aws",
                    "login": aws["login"],
                    "password": aws["password"],
                    "extra": json.dumps(aws["extra"]),
                },
                {
                    "connection_id": KEY_CONN,
                    "conn_type": "ssh",
                    "login": "root",
                    "extra": json.dumps({"private_key": Path(ec2.key).read_text()}),
                },
                {
                    "connection_id": "elasticgrid_ec2",
                    "conn_type": "elasticgrid",
                    "extra": json.dumps(grid),
                },
            ]
            for connection in connections:
                deployment.api("POST", "connections", json=connection)
                created.append(connection["connection_id"])
            yield ec2
    finally:
        for conn_id in created:
            deployment.api("DELETE", f"connections/{conn_id}")
        shutil.rmtree(pool, ignore_errors=True)


def _launch_logs(deployment: Deployment, job: str, dag_id: str = DAG_ID) -> str:
    """The job's launcher logs and the end of each launch task log of ``dag_id`` (what a
    failed launch explains itself with)."""
    logs = sorted((deployment.jobs_root / job).glob("specs/*/launcher.log"))
    task_logs = sorted(deployment.home.glob(f"worker-*/airflow/logs/dag_id={dag_id}/**/*.log"))
    tails = [
        path.read_text(errors="replace")[-4000:] for path in task_logs if "launch" in str(path)
    ]
    return "\n".join([f"== {path}\n{path.read_text(errors='replace')}" for path in logs] + tails)


def test_a_job_trains_on_fake_vms_through_the_celery_workers_and_leaves_nothing_running(
    deployment: Deployment, fake_ec2: FakeEc2
):
    job, token = "it-ec2", secrets.token_hex(12)
    with watching(fake_ec2) as watch:
        run_id = deployment.trigger(DAG_ID, {"job_name": job, "token": token})
        state = deployment.wait_for_run(DAG_ID, run_id, timeout=300)
    states = deployment.task_states(DAG_ID, run_id)
    if state != "success":
        pytest.fail(f"{states}\n{_launch_logs(deployment, job)}\nharness: {fake_ec2.errors}")
    assert states == {"plan": "success", "launch": "success", "scale_check": "skipped",
                      "stop": "success"}  # fmt: skip
    launched = deployment.xcom(DAG_ID, run_id, "launch", "job")
    assert [(part["provider"], part["nodes"]) for part in launched["parts"]] == [("aws", 2)]
    decision = deployment.xcom(DAG_ID, run_id, "scale_check")
    assert (decision["action"], decision["current_nodes"]) == ("hold", 2), decision
    stopped = deployment.xcom(DAG_ID, run_id, "stop")
    assert stopped["job_name"] == job and not stopped["nothing_left"], stopped
    assert [(part["engine"], part["nodes"]) for part in stopped["parts"]] == [("ec2", 2)]

    # two instances, one launch, and all terminated; their hosts and processes gone
    instances = fake_ec2.instances()
    assert len(instances) == 2
    launches = {{t["Key"]: t["Value"] for t in i["Tags"]}["elasticgrid:launch"] for i in instances}
    assert len(launches) == 1
    assert watch.most_alive == 2 and watch.duplicates == []
    wait_until("every fake VM's host removed", lambda: not fake_ec2.booted(), timeout=30)
    for index in range(len(fake_ec2.lan.namespaces)):
        assert fake_ec2.lan.sshd_pid(index) is None
    assert_nothing_left(fake_ec2, token)
    assert watch.command_lines and not [s for s in watch.command_lines if token in s]
    progress = fake_ec2.lan.pool / "eg" / job / "shared" / "checkpoint" / "progress.json"
    trained = json.loads(progress.read_text())
    assert trained["world_size"] == 2 and trained["completed_steps"] > 0, trained

    # the handed-over credentials and key never reached the job's files
    secrets_seen = [SECRET_KEY, Path(fake_ec2.key).read_text().splitlines()[1]]
    for path in (deployment.jobs_root / job).rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert not [s for s in secrets_seen if s in text], path


def test_a_deferrable_launch_waits_in_the_triggerer_which_reads_the_connections_and_ends_the_vm(
    deployment: Deployment, fake_ec2: FakeEc2
):
    dag_id, job, token = "it_ec2_deferred", "it-ec2-deferred", secrets.token_hex(12)
    with watching(fake_ec2) as watch:
        run_id = deployment.trigger(dag_id, {"job_name": job, "token": token})
        state = deployment.wait_for_run(dag_id, run_id, timeout=300)
    launch = deployment.task_instances(dag_id, run_id)["launch"]
    if state != "success":
        pytest.fail(
            f"{launch}\n{_launch_logs(deployment, job, dag_id)}\nharness: {fake_ec2.errors}"
        )
    assert launch["try_number"] == 1  # resumed after the trigger, not retried
    assert deployment.xcom(dag_id, run_id, "launch")["status"] == "done"
    # the wait ran in the triggerer, and its status look (the AWS and SSH connections read
    # there, from the metadata database) found the ranks done and terminated the instance
    trigger_logs = list(
        (deployment.home / "airflow" / "logs").glob(
            f"dag_id={dag_id}/run_id={run_id}/task_id=launch/attempt=1.log.trigger.*"
        )
    )
    assert trigger_logs, "the launch never deferred"
    text = trigger_logs[0].read_text()
    instances = fake_ec2.instances(**{"tag:elasticgrid:job": [job]})
    assert len(instances) == 1 and watch.duplicates == []
    assert f"Terminating the instances of part '{job}--aws'" in text, text[-3000:]
    assert instances[0]["InstanceId"] in text
    assert_nothing_left(fake_ec2, token)
