"""A provider's ec2 params, checked when the grid is read; the machines record."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from elasticgrid_provider.core.ec2_params import AddressKind, Ec2Params, SpotFallback
from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.machines import Market, read_machines
from elasticgrid_provider.core.providers import ENGINE_REFERENCES, provider_from_dict


def ec2_entry(key_file: str, **params: Any) -> dict[str, Any]:
    base = {"instance_type": "t3.micro", "image_id": "ami-1", "key_name": "eg", "ssh_key": key_file}
    return {
        "name": "aws",
        "engine": "ec2",
        "region": "us-east-1",
        "max_nodes": 4,
        "cost_per_node_hour": 1.0,
        "params": {**base, **params},
    }


@pytest.fixture
def key_file(tmp_path):
    path = tmp_path / "id_ed25519"
    path.write_text("key")
    return str(path)


def test_a_full_set_of_params_is_kept_and_defaults_fill_the_rest(key_file):
    provider = provider_from_dict(
        ec2_entry(
            key_file,
            tags={"team": "ml"},
            spot_fallback="on_demand",
            on_demand_cost_per_node_hour=4.5,
            address="public",
            user_data={"packages": ["rsync"]},
            rendezvous="s3://bucket/rdzv",
            shared_dir="/srv/pool",
            checkpoint_dir="/srv/pool/ckpt",
            security_group_ids=["sg-1"],
        )
    )
    params = Ec2Params.parse(dict(provider.params))
    assert params.spot_fallback is SpotFallback.ON_DEMAND and params.can_fall_back
    assert params.address is AddressKind.PUBLIC
    assert dict(params.tags) == {"team": "ml"} and params.security_group_ids == ("sg-1",)
    assert (params.aws_conn_id, params.ssh_user, params.python) == (
        "aws_default",
        "ubuntu",
        "python3",
    )
    assert params.boot_timeout_s == 300.0 and params.has_rendezvous()
    assert params.model_dump()["user_data"] == {"packages": ["rsync"]}
    assert provider.engine_target == ENGINE_REFERENCES["ec2"] + "/us-east-1"
    assert ENGINE_REFERENCES["ec2"] == "module=elasticgrid_provider.engines.ec2:Ec2Engine"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"instance_type": None},
            "params is missing the field 'instance_type' (the EC2 instance type",
        ),
        ({"image_id": None}, "params is missing the field 'image_id'"),
        ({"key_name": None}, "params is missing the field 'key_name'"),
        ({"ssh_key": None}, "params must give exactly one of ssh_key"),
        ({"ssh_conn_id": "ssh_default"}, "params must give exactly one of ssh_key"),
        ({"zone": "a"}, "params has an unknown field 'zone'"),
        ({"boot_timeout_s": math.nan}, "params.boot_timeout_s must be a finite number, got nan"),
        ({"boot_timeout_s": -1}, "params.boot_timeout_s must be greater than 0"),
        ({"boot_timeout_s": "60"}, "params.boot_timeout_s must be a number, got '60'"),
        ({"instance_type": ""}, "params.instance_type must not be empty"),
        ({"tags": {"elasticgrid:job": "x"}}, "params.tags must not set the tag 'elasticgrid:job'"),
        ({"tags": {"Name": "x"}}, "params.tags must not set the tag 'Name'"),
        ({"tags": {"team": 3}}, "params.tags must be a JSON object of strings"),
        ({"spot_fallback": "always"}, "params.spot_fallback must be one of 'none', 'on_demand'"),
        (
            {"spot_fallback": "on_demand"},
            "params is missing the field 'on_demand_cost_per_node_hour'",
        ),
        (
            {"spot_fallback": "on_demand", "on_demand_cost_per_node_hour": math.inf},
            "params.on_demand_cost_per_node_hour must be a finite number, got inf",
        ),
        ({"address": "ipv6"}, "params.address must be one of 'private', 'public'"),
        ({"user_data": {"ssh_keys": {}}}, "params.user_data must not set 'ssh_keys'"),
        ({"user_data": ["x"]}, "params.user_data must be a JSON object"),
        ({"rendezvous": "dir:/srv"}, "params.rendezvous must be an 's3://bucket[/prefix]' URI"),
        (
            {"checkpoint_dir": "/tmp/ck"},
            "params.checkpoint_dir must be an 's3://' URI or a folder",
        ),
        ({"security_group_ids": "sg-1"}, "params.security_group_ids must be a list"),
    ],
)
def test_bad_params_fail_in_one_sentence_naming_provider_and_field(key_file, change, message):
    entry = ec2_entry(key_file)
    for name, value in change.items():
        if value is None:
            entry["params"].pop(name)
        else:
            entry["params"][name] = value
    with pytest.raises(ElasticGridError) as refused:
        provider_from_dict(entry)
    text = str(refused.value)
    assert text.startswith(f"provider 'aws' {message}"), text
    assert "\n" not in text


def test_an_unreadable_key_file_is_refused_and_a_provider_without_params_still_plans(tmp_path):
    with pytest.raises(ElasticGridError, match=r"params.ssh_key names a file that cannot be read"):
        provider_from_dict(ec2_entry(str(tmp_path / "missing")))
    bare = provider_from_dict(
        {"name": "aws", "engine": "ec2", "max_nodes": 2, "cost_per_node_hour": 1}
    )
    assert bare.runs_on_ec2 and not bare.params


def test_machines_record_reads_back_and_refuses_a_bad_one(tmp_path):
    assert read_machines(tmp_path) == []
    instance = {
        "instance_id": "i-1",
        "instance_type": "t3.micro",
        "market": "spot",
        "zone": "us-east-1a",
        "state": "terminated",
        "launched_at": "2026-01-01T00:00:00+00:00",
        "address": "10.0.0.5",
        "state_reason": "Server.SpotInstanceTermination: Spot instance termination",
    }
    record = {"part": "job--aws", "launch_id": "L1", "instances": [instance]}
    (tmp_path / "machines.json").write_text(json.dumps(record))
    (machine,) = read_machines(tmp_path)
    assert machine.market is Market.SPOT and machine.reclaimed
    (tmp_path / "machines.json").write_text(
        json.dumps({**record, "instances": [{"instance_id": "i"}]})
    )
    with pytest.raises(ElasticGridError, match=r"machines record .* is missing the field"):
        read_machines(tmp_path)


def test_the_plan_shows_the_on_demand_price_when_spot_may_fall_back(key_file):
    from elasticgrid_provider.core.formatting import placement_table
    from elasticgrid_provider.core.placement import Assignment, Placement

    entry = ec2_entry(key_file, spot_fallback="on_demand", on_demand_cost_per_node_hour=4.5)
    falls_back = provider_from_dict({**entry, "spot": True, "cost_per_node_hour": 1.5})
    assert falls_back.fallback_cost_per_node_hour == 4.5
    placement = Placement((Assignment(falls_back, 2),))
    assert (placement.cost_per_hour, placement.fallback_cost_per_hour) == (3.0, 9.0)
    assert (
        placement_table(placement).splitlines()[-1] == "if spot falls back to on-demand: 9.00 $/h"
    )
    never = provider_from_dict({**ec2_entry(key_file), "spot": True})
    assert Placement((Assignment(never, 2),)).fallback_cost_per_hour is None
    assert "falls back" not in placement_table(Placement((Assignment(never, 2),)))


def test_the_ssh_engine_params_of_instances_carry_the_key_source_and_the_launch_known_hosts(
    tmp_path,
):
    from elasticgrid_provider.core.ssh_params import SshParams
    from elasticgrid_provider.engines.ec2_launch import ssh_engine_params

    raw = {"instance_type": "t3", "image_id": "ami-1", "key_name": "k", "ssh_conn_id": "pool"}
    params = Ec2Params.parse({**raw, "python": "/opt/py/bin/python", "remote_dir": "/scratch/p"})
    hosts = ["ubuntu@10.0.0.5", "ubuntu@10.0.0.5", "ubuntu@10.0.0.6"]  # one per rank
    ssh = SshParams.parse(ssh_engine_params(params, tmp_path, hosts))
    assert ssh.hosts == ("ubuntu@10.0.0.5", "ubuntu@10.0.0.6")
    assert (ssh.ssh_conn_id, ssh.ssh_key) == ("pool", None)
    assert ssh.known_hosts == str(tmp_path / "known_hosts")
    assert (ssh.python, ssh.remote_dir, ssh.connect_timeout_s) == (
        "/opt/py/bin/python",
        "/scratch/p",
        5.0,
    )
