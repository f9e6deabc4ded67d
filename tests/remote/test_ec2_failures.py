"""Launches on fake EC2 VMs that fail: each fails the task in one sentence and leaves zero
instances not terminated."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.airflow_support import run_dag
from tests.ec2_hosts import FakeEc2, assert_nothing_left
from tests.remote.conftest import ec2_provider, use_grid

pytestmark = [pytest.mark.airflow, pytest.mark.long]


@pytest.fixture
def silent_vms(
    jobs_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FakeEc2]:
    """Provider ``aws`` whose instances run but never answer SSH (boot_timeout_s 6)."""
    with FakeEc2(hide=[jobs_root], pool=tmp_path / "pool", answer=False) as ec2:
        provider = ec2_provider("aws", ec2, 2)
        provider["params"]["boot_timeout_s"] = 6
        use_grid(monkeypatch, jobs_root, [provider], "ec2")
        yield ec2


def test_instances_that_never_answer_ssh_fail_the_launch_and_are_terminated(
    airflow_db, jobs_root, silent_vms: FakeEc2
):
    result = run_dag("ec2_launch_once", {"job_name": "silent", "nodes": 2})

    assert result.task_states == {"plan": "success", "launch": "failed"}
    assert len(silent_vms.instances()) == 2  # started, then terminated by the failed launch
    assert_nothing_left(silent_vms, "none")


def test_a_program_failing_at_start_is_named_by_its_own_last_line_after_its_vm_ended(
    airflow_db, jobs_root, ec2_pool: FakeEc2, capfd
):
    result = run_dag("ec2_failing_start", {"job_name": "failing"})

    assert result.task_states == {"plan": "success", "launch": "failed"}
    manifest = json.loads((jobs_root / "failing" / "manifest.json").read_text())
    assert manifest["state"] == "down"  # a failing program is no lost capacity
    # the rank's log went with its instance; its last lines were kept before the end, and the
    # failure report shows them
    report = "failed (down ranks: [0]); last 20 log lines:\nloading shard 7\nboom: corrupt batch"
    assert report in capfd.readouterr().out
    assert_nothing_left(ec2_pool, "none")


def test_no_room_for_the_second_part_terminates_the_first_and_counts_as_no_room(
    airflow_db, jobs_root, two_clouds: FakeEc2
):
    # two providers of one instance each: one part each, started one after the other; the
    # cloud refuses the second RunInstances, as AWS does when a zone runs out of a type
    message = (
        "We currently do not have sufficient t3.micro capacity in the Availability Zone you "
        "requested (us-east-1a)."
    )
    second = lambda count, kwargs: count == 2  # noqa: E731
    with two_clouds.fail("run_instances", "InsufficientInstanceCapacity", message, second):
        result = run_dag("ec2_launch_once", {"job_name": "roomless", "nodes": 2})

    assert result.task_states == {"plan": "success", "launch": "failed"}
    assert two_clouds.calls["run_instances"] == 2
    (first,) = two_clouds.instances()  # the first part's instance; the refused one got none
    first_part = {tag["Key"]: tag["Value"] for tag in first["Tags"]}["elasticgrid:part"]
    (refused,) = {"spot", "ondemand"} - {first_part.rsplit("--", 1)[-1]}
    manifest = json.loads((jobs_root / "roomless" / "manifest.json").read_text())
    assert manifest["state"] == "lost"  # no room there: the next check may place elsewhere
    reason = manifest["down_reason"]
    assert f"provider {refused!r} has no capacity for t3.micro instance 1 of 1" in reason
    assert f"InsufficientInstanceCapacity: {message}" in reason
    assert first["State"]["Name"] == "terminated"
    assert_nothing_left(two_clouds, "none")
