"""A launch onto an ec2 provider through the real LaunchManager (launcher process, iroh-tinker's
JobManager, the ec2 engine) against a real EC2 API (moto's server): a cloud without room is
capacity taken away, not a crash, and no instance is left."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from elasticgrid_provider.core.errors import ElasticGridError, JobLaunchError
from elasticgrid_provider.core.launch_spec import LaunchOptions
from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.providers import Provider
from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook
from tests.engines.ec2_cloud import moto_ec2, part_params

pytestmark = [pytest.mark.airflow, pytest.mark.long]
SECRET = "hf_token_value_never_on_a_vm"


@pytest.fixture
def cloud(monkeypatch: pytest.MonkeyPatch):
    with moto_ec2(monkeypatch) as started:
        yield started
        assert started.not_terminated() == []


def aws(cloud, tmp_path: Path, **params) -> Provider:
    return Provider(
        "aws",
        max_nodes=4,
        cost_per_node_hour=1.0,
        region="us-east-1",
        engine="ec2",
        spot=False,
        params=part_params(cloud, tmp_path, boot_timeout_s=2, **params),
    )


def test_no_room_on_the_second_instance_records_the_launch_lost_and_leaves_nothing(
    cloud, jobs_root, tmp_path
):
    manager = ElasticGridHook(jobs_root=str(jobs_root)).launch_manager("cap")
    placement = GridPlanner(providers=(aws(cloud, tmp_path),)).plan(2)
    options = LaunchOptions(run="python train.py", envs={"HF_TOKEN": SECRET})
    message = "We currently do not have sufficient t3.micro capacity."
    second = lambda count, kwargs: count == 2  # noqa: E731
    with (
        cloud.fail("run_instances", "InsufficientInstanceCapacity", message, second),
        pytest.raises(JobLaunchError) as failed,
    ):
        manager.launch(placement, options, startup_grace_s=0.5)
    text = str(failed.value)
    assert f"InsufficientInstanceCapacity: {message}" in text
    assert "provider 'aws' has no capacity for t3.micro instance 2 of 2" in text
    manifest = json.loads((jobs_root / "cap" / "manifest.json").read_text())
    assert manifest["state"] == "lost"  # no room: the next check recovers it elsewhere
    (only,) = cloud.instances()
    assert only["State"]["Name"] == "terminated"
    assert SECRET not in json.dumps(only["Tags"])


def test_a_multi_instance_part_without_a_rendezvous_is_refused_before_any_instance(
    cloud, jobs_root, tmp_path
):
    manager = ElasticGridHook(jobs_root=str(jobs_root)).launch_manager("alone")
    provider = aws(cloud, tmp_path)
    params = {key: value for key, value in provider.params.items() if key != "shared_dir"}
    placement = GridPlanner(providers=(replace(provider, params=params),)).plan(2)
    with pytest.raises(ElasticGridError, match="rendezvous is needed for 2 processes"):
        manager.launch(placement, LaunchOptions(run="python train.py"), startup_grace_s=0.5)
    assert cloud.instances() == []
