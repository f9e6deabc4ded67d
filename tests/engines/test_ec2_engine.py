"""The ec2 engine against a real EC2 API (moto's server): tags, tokens, user data, and every
failure on the way ending with no instance left running."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml
from iroh_tinker.cloud.spec import spec_from_dict

from elasticgrid_provider.core.errors import (
    CloudCapacityError,
    ElasticGridError,
    InstancesLeftError,
    RemoteHostError,
)
from elasticgrid_provider.core.machines import Market, read_machines
from elasticgrid_provider.core.rank_environment import ENV_JOB, ENV_LAUNCH_ID
from elasticgrid_provider.engines.ec2 import ENGINE_REF, Ec2Engine
from elasticgrid_provider.engines.ec2_launch import INTENT_FILE, KNOWN_HOSTS_FILE, launch_tags
from elasticgrid_provider.engines.instances import Ec2Instances, terminate_tagged
from tests.engines.ec2_cloud import MotoEc2, moto_ec2, part_params

JOB = "trainer"
PART = f"{JOB}--aws"
SECRET = "hf_secret_value_never_on_a_vm"


@pytest.fixture
def cloud(monkeypatch: pytest.MonkeyPatch) -> Any:
    with moto_ec2(monkeypatch) as started:
        yield started
        # every test ends with no instance left that is not terminated
        assert started.not_terminated() == []


def engine(cloud: MotoEc2, tmp_path: Path, *, nodes: int = 2, spot: bool = False, **params: Any):
    launch_id = params.pop("launch_id", "L1")
    params = part_params(cloud, tmp_path, **{"tags": {"team": "ml"}, **params})
    spec = spec_from_dict(
        {
            "name": PART,
            "run": "python train.py",
            "num_nodes": nodes,
            "envs": {
                ENV_JOB: JOB,
                ENV_LAUNCH_ID: launch_id,
                "HF_TOKEN": SECRET,
            },
            "resources": {
                "infra": [f"{ENGINE_REF}/us-east-1"],
                "use_spot": spot,
                "params": params,
            },
        }
    )
    return Ec2Engine(spec, target=f"{ENGINE_REF}/us-east-1")


def user_data_of(cloud: MotoEc2, instance_id: str) -> str:
    answer = cloud.client.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
    return base64.b64decode(answer["UserData"]["Value"]).decode()


def test_hosts_that_never_answer_ssh_are_all_terminated_after_boot_timeout(cloud, tmp_path):
    folder = tmp_path / "part"
    with pytest.raises(RemoteHostError, match=r"not reachable over SSH within boot_timeout_s=3 s"):
        engine(cloud, tmp_path).provision(str(folder))
    instances = cloud.instances()
    assert len(instances) == 2
    for index, instance in enumerate(sorted(instances, key=lambda item: item["PrivateIpAddress"])):
        tags = {tag["Key"]: tag["Value"] for tag in instance["Tags"]}
        assert tags == {
            "elasticgrid:job": JOB,
            "elasticgrid:part": PART,
            "elasticgrid:launch": "L1",
            "Name": f"{PART}-{index}",
            "team": "ml",
        }
        assert instance["State"]["Name"] == "terminated"
        text = user_data_of(cloud, instance["InstanceId"])
        assert text.startswith("#cloud-config\n") and SECRET not in text
        assert SECRET not in json.dumps(tags)
        keys = yaml.safe_load(text)["ssh_keys"]
        assert keys["ed25519_private"].startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
        assert keys["ed25519_public"].startswith("ssh-ed25519 AAAA")
    # the intent came first (private), the known_hosts lists the launch's key for each address
    intent = json.loads((folder / INTENT_FILE).read_text())
    assert (intent["launch_id"], intent["part"], len(intent["client_tokens"])) == ("L1", PART, 2)
    assert stat.S_IMODE((folder / INTENT_FILE).stat().st_mode) == 0o600
    known = (folder / KNOWN_HOSTS_FILE).read_text().splitlines()
    public = intent["host_key"]["public"].split()[1]
    addresses = sorted(item["PrivateIpAddress"] for item in instances)
    assert known == [f"{address} ssh-ed25519 {public}" for address in addresses]
    machines = read_machines(folder)
    assert {machine.state for machine in machines} == {"terminated"}
    assert {machine.market for machine in machines} == {Market.ON_DEMAND}


def test_a_repeated_provision_of_the_same_launch_creates_no_second_set(cloud, tmp_path):
    folder = tmp_path / "part"
    first = engine(cloud, tmp_path, boot_timeout_s=60)
    intent = first.record_intent(folder)
    started = first.run_instances(folder, intent)
    retry = engine(cloud, tmp_path, boot_timeout_s=60)  # a retried task, the same launch
    again = retry.run_instances(folder, retry.record_intent(folder))
    assert [item.instance_id for item in again] == [item.instance_id for item in started]
    assert len(cloud.instances()) == 2
    assert json.loads((folder / INTENT_FILE).read_text())["host_key"] == intent["host_key"]
    ended = terminate_tagged(Ec2Instances("aws_default"), retry.tags, "the test's instances")
    assert sorted(ended) == sorted(item.instance_id for item in started)


def test_a_capacity_error_on_the_second_call_terminates_the_first_and_says_no_room(cloud, tmp_path):
    message = "We currently do not have sufficient t3.micro capacity in us-east-1a."
    second = lambda count, kwargs: count == 2  # noqa: E731
    with (
        cloud.fail("run_instances", "InsufficientInstanceCapacity", message, second),
        pytest.raises(CloudCapacityError) as refused,
    ):
        # 2 nodes: the first RunInstances goes alone, so the second call is node 2's
        engine(cloud, tmp_path, nodes=2).provision(str(tmp_path / "part"))
    text = str(refused.value)
    assert text == (
        "provider 'aws' has no capacity for t3.micro instance 2 of 2: EC2 "
        f"RunInstances failed: InsufficientInstanceCapacity: {message}"
    )
    (only,) = cloud.instances()
    assert only["State"]["Name"] == "terminated"


def test_spot_falls_back_to_on_demand_only_when_asked_and_records_the_price(cloud, tmp_path):
    spot_only = lambda count, kwargs: kwargs.get("instance_market_options") == "spot"  # noqa: E731
    with cloud.fail("run_instances", "InsufficientInstanceCapacity", "no spot", spot_only):
        with pytest.raises(CloudCapacityError, match="InsufficientInstanceCapacity: no spot"):
            engine(cloud, tmp_path, spot=True).provision(str(tmp_path / "a"))
        assert cloud.instances() == []
        fallback = engine(
            cloud,
            tmp_path,
            spot=True,
            launch_id="L2",
            spot_fallback="on_demand",
            on_demand_cost_per_node_hour=4.5,
        )
        with pytest.raises(RemoteHostError):  # no host answers: terminated after boot_timeout
            fallback.provision(str(tmp_path / "b"))
    intent = json.loads((tmp_path / "b" / INTENT_FILE).read_text())
    assert intent["market"] == "on-demand"
    assert intent["fallback"]["cost_per_node_hour"] == 4.5
    assert "InsufficientInstanceCapacity" in intent["fallback"]["cause"]
    assert {item.get("InstanceLifecycle") for item in cloud.instances()} == {None}
    assert {machine.market for machine in read_machines(tmp_path / "b")} == {Market.ON_DEMAND}


def test_spot_instances_are_requested_as_spot(cloud, tmp_path):
    spot = engine(cloud, tmp_path, nodes=1, spot=True, boot_timeout_s=60)
    folder = tmp_path / "part"
    spot.run_instances(folder, spot.record_intent(folder))
    assert [item.get("InstanceLifecycle") for item in cloud.instances()] == ["spot"]
    terminate_tagged(Ec2Instances("aws_default"), spot.tags, "the test's instances")


def test_termination_is_retried_and_names_the_instances_it_could_not_end(cloud, tmp_path):
    part = engine(cloud, tmp_path, boot_timeout_s=60)
    folder = tmp_path / "part"
    ids = sorted(i.instance_id for i in part.run_instances(folder, part.record_intent(folder)))
    api = Ec2Instances("aws_default")
    refuse = "IncorrectInstanceState"
    with cloud.fail("terminate_instances", refuse, "still pending", lambda n, kw: n <= 2):
        assert sorted(terminate_tagged(api, part.tags, "them", backoff_s=0.01)) == ids
    assert cloud.not_terminated() == []
    assert cloud.calls["terminate_instances"] == 3
    more = engine(cloud, tmp_path, boot_timeout_s=60, launch_id="L2")
    ids = sorted(i.instance_id for i in more.run_instances(folder, more.record_intent(folder)))
    with (
        cloud.fail("terminate_instances", refuse, "still pending", lambda n, kw: True),
        pytest.raises(InstancesLeftError) as left,
    ):
        terminate_tagged(api, more.tags, "the instances of L2", attempts=2, backoff_s=0.01)
    assert str(left.value) == (
        f"the instances of L2 could not be terminated after 2 tries; still alive: "
        f"{', '.join(ids)}: EC2 TerminateInstances failed: IncorrectInstanceState: still pending"
    )
    terminate_tagged(api, launch_tags(JOB, None, None), "the test's instances")


def test_a_multi_instance_part_without_a_rendezvous_fails_before_any_instance(cloud, tmp_path):
    part = engine(cloud, tmp_path, shared_dir=None)
    part.spec.resources.params.pop("shared_dir")
    with pytest.raises(ElasticGridError, match=r"2 instances need a rendezvous their ranks all"):
        part.provision(str(tmp_path / "part"))
    assert cloud.instances() == []


def started_cluster(part: Ec2Engine, folder: Path):
    """The part's instances as provision returns them (no host answers in these tests)."""
    from iroh_tinker.cloud.engines.base import ClusterInfo, Node

    instances = part.run_instances(folder, part.record_intent(folder))
    nodes = [
        Node(rank=rank, host=f"root@{item.private_address}", env={"instance_id": item.instance_id})
        for rank, item in enumerate(instances)
    ]
    meta = {"pids": {}, "job_dir": str(folder)}
    return ClusterInfo(part.spec.name, part.name, nodes, meta), [i.instance_id for i in instances]


def test_a_spot_reclaim_is_lost_capacity_with_its_cause_and_the_part_ends(cloud, tmp_path):
    from tests.engines.ec2_cloud import reclaim

    part = engine(cloud, tmp_path, spot=True, boot_timeout_s=60)
    folder = tmp_path / "part"
    cluster, (first, second) = started_cluster(part, folder)
    reclaim(cloud, first)
    words = part.status(cluster)  # no host answers: every rank stopped, the part has ended
    assert words == {0: "stopped", 1: "stopped"}
    assert part.logs(cluster, 0) == f"preempted: spot instance {first} reclaimed by AWS\n"
    from elasticgrid_provider.core.recovery import is_capacity_loss, loss_cause

    cause = loss_cause(part.logs(cluster, 0), "down ranks: [0]")
    assert cause == f"preempted: spot instance {first} reclaimed by AWS" and is_capacity_loss(cause)
    machines = {machine.instance_id: machine for machine in read_machines(folder)}
    assert machines[first].reclaimed and machines[first].market is Market.SPOT
    assert machines[second].state == "terminated" and not machines[second].reclaimed
    remote = json.loads((folder / "remote-status.json").read_text())
    assert sorted(remote["unreachable_hosts"]) == sorted(node.host for node in cluster.nodes)


def test_stop_terminates_the_parts_instances_by_tag_and_a_second_stop_finds_none(cloud, tmp_path):
    part = engine(cloud, tmp_path, boot_timeout_s=60)
    folder = tmp_path / "part"
    cluster, ids = started_cluster(part, folder)
    other = engine(cloud, tmp_path, boot_timeout_s=60, launch_id="L9")
    other_cluster, kept = started_cluster(other, tmp_path / "other")
    part.stop(cluster)
    assert sorted(cloud.not_terminated()) == sorted(kept)  # another launch is left alone
    assert {machine.state for machine in read_machines(folder)} == {"terminated"}
    part.stop(cluster)  # nothing left: no error
    other.stop(other_cluster)
    assert cloud.not_terminated() == [] and len(ids) == 2


def test_the_engine_rebuilt_from_iroh_tinkers_saved_spec_keeps_its_params(cloud, tmp_path):
    from iroh_tinker.cloud.spec import dump_spec, load_spec

    part = engine(cloud, tmp_path)
    dump_spec(part.spec, tmp_path / "spec.json")  # what JobManager saves and rebuilds from
    rebuilt = Ec2Engine(load_spec(tmp_path / "spec.json"), target=part.target)
    assert rebuilt.spec.resources.params.get("instance_type") is None  # moved out by iroh
    assert rebuilt.params == part.params


def test_a_failed_provision_retries_a_refused_termination_until_nothing_is_left(cloud, tmp_path):
    refuse = "IncorrectInstanceState"
    with (
        cloud.fail("terminate_instances", refuse, "still pending", lambda n, kw: n <= 2),
        pytest.raises(RemoteHostError, match="not reachable over SSH"),
    ):
        engine(cloud, tmp_path, boot_timeout_s=2).provision(str(tmp_path / "part"))
    assert cloud.calls["terminate_instances"] == 3
    assert {machine.state for machine in read_machines(tmp_path / "part")} == {"terminated"}


def test_the_last_rank_logs_are_kept_once_per_launch_and_read_after_the_instances_end(tmp_path):
    from elasticgrid_provider.engines.ec2_status import (
        forget_last_launch,
        keep_last_logs,
        kept_log,
    )

    def unreachable(rank: int) -> str:
        raise OSError(f"rank {rank}'s instance is gone")

    logs = {0: "loading shard 7\nboom: corrupt batch\n", 1: "", 2: "step 3\n"}
    keep_last_logs(tmp_path, logs.__getitem__, [0, 1, 2])
    assert kept_log(tmp_path, 0, 1) == "boom: corrupt batch\n"
    assert kept_log(tmp_path, 0, 50) == logs[0]
    assert kept_log(tmp_path, 1, 50) is None  # nothing to keep: read remotely, as before
    # a later look, the instances gone, replaces nothing
    keep_last_logs(tmp_path, unreachable, [0, 1, 2])
    keep_last_logs(tmp_path, lambda rank: "", [0])
    assert kept_log(tmp_path, 2, 50) == "step 3\n"
    forget_last_launch(tmp_path)  # a new launch of the part
    assert kept_log(tmp_path, 0, 50) is None
