"""Training on fake EC2 VMs, driven by real task runs: moto's EC2 API starts the instances, the
harness boots each as an SSH host (tests/ec2_hosts.py), the ec2 engine runs the ranks on them.

Every test ends with zero instances not terminated (DescribeInstances, every state), and a
watcher checks throughout that no launch, part and index ever has two live instances.
"""

from __future__ import annotations

import json
import secrets
from collections import Counter

import pytest

from elasticgrid_provider.cli import main as cli
from tests.airflow_support import run_dag
from tests.ec2_hosts import FakeEc2, assert_nothing_left, watching
from tests.moto_server import S3_BUCKET

pytestmark = [pytest.mark.airflow, pytest.mark.long]


def test_a_job_trains_on_fake_vms_grows_from_one_to_two_and_leaves_nothing_running(
    airflow_db, jobs_root, ec2_pool: FakeEc2, capsys
):
    token = secrets.token_hex(12)
    with watching(ec2_pool) as watch:
        result = run_dag("ec2_training", {"job_name": "cloud", "steps": 60, "token": token})

    assert set(result.task_states.values()) == {"success"}, result.task_states
    decision = result.xcom("scale_check")
    assert (decision["action"], decision["current_nodes"], decision["target_nodes"]) == (
        "scale_up",
        1,
        2,
    )
    finished = result.xcom("relaunch")
    assert (finished["status"], finished["nodes"]) == ("done", 2)
    progress = json.loads(
        (ec2_pool.lan.pool / "eg" / "cloud" / "shared" / "checkpoint" / "progress.json").read_text()
    )
    assert (progress["completed_steps"], progress["world_size"]) == (60, 2)

    # three instances in all (1, then 2 for the relaunch), never two for one slot
    launches = Counter(
        {t["Key"]: t["Value"] for t in i["Tags"]}["elasticgrid:launch"]
        for i in ec2_pool.instances()
    )
    assert sorted(launches.values()) == [1, 2]
    assert watch.duplicates == [] and watch.most_alive <= 3
    assert_nothing_left(ec2_pool, token)
    assert watch.command_lines and not [s for s in watch.command_lines if token in s]

    capsys.readouterr()  # the DAG run's log
    code = cli(["machines", "cloud", "--json"])
    shown = json.loads(capsys.readouterr().out)
    assert code == 0
    newest = {
        i["InstanceId"]
        for i in ec2_pool.instances(**{"tag:elasticgrid:launch": [shown["launch_id"]]})
    }
    assert len(newest) == 2
    assert newest <= {row["instance_id"] for row in shown["machines"]}
    assert {row["state"] for row in shown["machines"]} == {"terminated"}
    assert {row["market"] for row in shown["machines"]} == {"spot"}


def test_ranks_on_fake_vms_with_no_shared_disk_meet_and_resume_in_s3(
    airflow_db, jobs_root, ec2_s3_pool: FakeEc2, tmp_path
):
    """No folder is shared with Airflow or between the instances: the ranks meet through an
    s3:// rendezvous and commit to an s3:// checkpoint, which the grown job resumes from."""
    conf = {"job_name": "s3-job", "steps": 40, "s3_endpoint": ec2_s3_pool.endpoint_url}
    with watching(ec2_s3_pool) as watch:
        result = run_dag("ec2_training_s3", conf)

    assert set(result.task_states.values()) == {"success"}, result.task_states
    decision = result.xcom("scale_check")
    assert (decision["current_nodes"], decision["target_nodes"]) == (1, 2)
    finished = result.xcom("relaunch")
    assert (finished["status"], finished["nodes"]) == ("done", 2)
    s3 = ec2_s3_pool.s3()
    progress = s3.get_object(Bucket=S3_BUCKET, Key="checkpoints/s3-job/progress.json")
    committed = json.loads(progress["Body"].read())
    assert (committed["completed_steps"], committed["world_size"]) == (40, 2)
    assert committed["step_record"]["nodes"] == 2
    # the check grew it from steps at 1 node, each committed to S3 as it ended
    (mirror,) = jobs_root.glob("s3-job--*/steps.jsonl")
    first_steps = [json.loads(line) for line in mirror.read_text().splitlines()]
    assert first_steps and {sample["nodes"] for sample in first_steps} == {1}
    # the 2-node launch's ranks met under its own prefix of the rendezvous: one address each
    # (a 1-node launch needs none)
    tickets = s3.list_objects_v2(Bucket=S3_BUCKET, Prefix="rendezvous/s3-job/")["Contents"]
    per_launch = Counter(item["Key"].split("/")[2] for item in tickets)
    assert per_launch == {finished["launch_id"]: 2}, per_launch
    assert not any((tmp_path / "pool").rglob("*")), "nothing was written to a shared folder"
    assert watch.duplicates == []
    assert_nothing_left(ec2_s3_pool, "none")


def test_a_spot_reclaim_mid_training_is_lost_capacity_recovered_elsewhere(
    airflow_db, jobs_root, two_clouds: FakeEc2
):
    import time

    conf = {"job_name": "reclaimed", "nodes": 1, "steps": 120}
    launched = run_dag("ec2_launch", conf)
    assert launched.xcom("launch", "job")["parts"][0]["provider"] == "spot"
    (instance,) = two_clouds.alive()
    (index,) = two_clouds.wait_booted([instance])
    steps = "~/elasticgrid/reclaimed--spot/.elasticgrid/steps.jsonl"
    deadline = time.monotonic() + 90
    while len(two_clouds.lan.run(index, f"cat {steps} 2>/dev/null").stdout.splitlines()) < 5:
        assert time.monotonic() < deadline, "the job logged no steps on its spot instance"
        time.sleep(0.5)
    two_clouds.reclaim(instance)

    result = run_dag("ec2_recovery", conf)

    assert result.task_states == {
        "scale_check": "success",
        "plan": "success",
        "relaunch": "success",
    }
    decision = result.xcom("scale_check")
    assert decision["rule"] == "recover", decision
    (lost,) = decision["lost"]
    assert lost["provider"] == "spot"
    assert f"spot instance {instance} reclaimed by AWS" in lost["cause"]
    finished = result.xcom("relaunch")
    assert finished["status"] == "done"
    assert [part["provider"] for part in finished["parts"]] == ["ondemand"]
    progress = json.loads(
        (
            two_clouds.lan.pool / "eg" / "reclaimed" / "shared" / "checkpoint" / "progress.json"
        ).read_text()
    )
    assert progress["completed_steps"] == 120
    assert_nothing_left(two_clouds, "none")


def test_the_teardown_stop_ends_every_instance_after_a_failed_check(
    airflow_db, jobs_root, ec2_pool: FakeEc2, capsys
):
    conf = {"job_name": "torn", "nodes": 2, "steps": 100000}

    result = run_dag("ec2_teardown", conf)

    assert result.task_states["launch"] == "success"
    assert result.task_states["train_checks"] == "failed"
    assert result.task_states["stop"] == "success"
    stopped = result.xcom("stop")
    assert [(part["engine"], part["nodes"]) for part in stopped["parts"]] == [("ec2", 2)]
    assert len(ec2_pool.instances()) == 2
    assert_nothing_left(ec2_pool, "none")
    for index in range(len(ec2_pool.lan.namespaces)):
        assert ec2_pool.lan.sshd_pid(index) is None  # every host (and its processes) gone

    code = cli(["stop", "torn"])
    assert code == 0
    assert "nothing left to stop" in capsys.readouterr().out


def test_a_job_that_ends_leaves_no_instance_when_its_dag_run_ends_without_a_teardown(
    airflow_db, jobs_root, ec2_pool: FakeEc2
):
    result = run_dag("ec2_until_done", {"job_name": "finished", "nodes": 1, "steps": 40})

    # the check that sees the job done skips: there is nothing to scale
    assert result.task_states == {"plan": "success", "launch": "success", "scale_check": "skipped"}
    assert result.xcom("launch", "job")["status"] == "running"  # it outlived its launch task
    (instance,) = ec2_pool.instances()
    assert instance["State"]["Name"] == "terminated"
    assert_nothing_left(ec2_pool, "none")  # no stop, no teardown: the check ended it
