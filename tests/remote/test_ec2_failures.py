"""Launches on fake EC2 VMs that fail: each fails the task in one sentence and leaves zero
instances not terminated."""

from __future__ import annotations

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
