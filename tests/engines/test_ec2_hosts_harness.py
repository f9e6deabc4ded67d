"""The fake-VM harness itself (tests/ec2_hosts.py): plain boto3 RunInstances against its moto
server boot SSH hosts that take their host key from the user data, as cloud-init would."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ec2_hosts import KEY_NAME, SPOT_REASON, FakeEc2


@pytest.fixture
def fake_ec2(tmp_path: Path) -> Iterator[FakeEc2]:
    with FakeEc2(hide=[tmp_path], pool=tmp_path / "pool") as ec2:
        yield ec2


def host_key_pair(folder: Path) -> tuple[str, str]:
    """A fresh ed25519 key pair: (private PEM text, 'ssh-ed25519 AAAA... comment')."""
    path = folder / "host_key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "fake-vm", "-f", str(path)],
        check=True,
    )
    return path.read_text(), Path(f"{path}.pub").read_text().strip()


def run_instance(ec2: FakeEc2, user_data: str | None = None) -> dict:
    arguments = {
        "ImageId": ec2.image_id,
        "InstanceType": "t3.micro",
        "MinCount": 1,
        "MaxCount": 1,
        "KeyName": KEY_NAME,
        "SubnetId": ec2.subnet_id,
    }
    if user_data is not None:
        arguments["UserData"] = user_data
    return ec2.client.run_instances(**arguments)["Instances"][0]


def terminate_all(ec2: FakeEc2) -> None:
    """Terminate what the test started, then count: zero instances not terminated (every
    state), and no host left for any of them."""
    started = [instance["InstanceId"] for instance in ec2.instances()]
    alive = ec2.alive()
    if alive:
        ec2.client.terminate_instances(InstanceIds=alive)
    ec2.sync()  # the watcher's pass, run here so the count needs no wait
    assert ec2.alive() == []
    assert [ec2.host_index(instance_id) for instance_id in started] == [None] * len(started)


def strict_ssh(ec2: FakeEc2, address: str, known_hosts: Path) -> subprocess.CompletedProcess:
    """``ssh root@address`` with the key pair's key and StrictHostKeyChecking=yes."""
    return subprocess.run(
        [
            "ssh",
            *("-i", ec2.key, "-o", f"UserKnownHostsFile={known_hosts}"),
            *("-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes"),
            *("-o", "ConnectTimeout=3", f"root@{address}", "cat /proc/1/comm; hostname -I"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_an_instance_boots_with_the_user_data_host_key(fake_ec2: FakeEc2, tmp_path: Path) -> None:
    private, public = host_key_pair(tmp_path)
    user_data = "#cloud-config\n" + "ssh_keys:\n  ed25519_private: |\n"
    user_data += "".join(f"    {line}\n" for line in private.splitlines())
    user_data += f"  ed25519_public: {public}\n"
    instance = run_instance(fake_ec2, user_data)
    address = instance["PrivateIpAddress"]
    assert address.startswith(f"{fake_ec2.lan.prefix}.")
    fake_ec2.wait_booted([instance["InstanceId"]])
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"{address} {' '.join(public.split()[:2])}\n")

    result = strict_ssh(fake_ec2, address, known_hosts)

    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["sshd", address]
    assert fake_ec2.errors == []
    terminate_all(fake_ec2)


def test_an_instance_without_ssh_keys_fails_strict_checking(
    fake_ec2: FakeEc2, tmp_path: Path
) -> None:
    _, public = host_key_pair(tmp_path)  # the key the client expects, never given to the VM
    instance = run_instance(fake_ec2, "#cloud-config\npackages: [htop]\n")
    fake_ec2.wait_booted([instance["InstanceId"]])
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"{instance['PrivateIpAddress']} {' '.join(public.split()[:2])}\n")

    result = strict_ssh(fake_ec2, instance["PrivateIpAddress"], known_hosts)

    assert result.returncode == 255
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in result.stderr
    terminate_all(fake_ec2)


def test_terminate_and_reclaim_remove_the_hosts(fake_ec2: FakeEc2) -> None:
    first, second = (run_instance(fake_ec2)["InstanceId"] for _ in range(2))
    indexes = fake_ec2.wait_booted([first, second])
    namespaces = [fake_ec2.lan.namespaces[index] for index in indexes]
    assert all(Path(f"/run/netns/{name}").exists() for name in namespaces)

    fake_ec2.client.terminate_instances(InstanceIds=[first])
    fake_ec2.reclaim(second)

    reclaimed = fake_ec2.instances(**{"instance-id": [second]})[0]
    assert reclaimed["State"]["Name"] == "terminated"
    assert reclaimed["StateReason"]["Code"] == SPOT_REASON
    assert not Path(f"/run/netns/{namespaces[1]}").exists()
    fake_ec2.sync()  # the watcher's pass, run here so the assertion needs no wait
    assert not Path(f"/run/netns/{namespaces[0]}").exists()
    assert fake_ec2.alive() == []
    assert fake_ec2.host_index(first) is None


def test_hosts_that_never_answer(tmp_path: Path) -> None:
    with FakeEc2(answer=False) as ec2:
        instance = run_instance(ec2)
        ec2.sync()
        assert ec2.host_index(instance["InstanceId"]) is None
        result = strict_ssh(ec2, instance["PrivateIpAddress"], tmp_path / "none")
        assert result.returncode == 255
        terminate_all(ec2)


def test_close_leaves_no_namespace_and_restores_the_connection(tmp_path: Path) -> None:
    before = os.environ.get("AIRFLOW_CONN_AWS_DEFAULT")
    with FakeEc2() as ec2:
        instance = run_instance(ec2)
        (index,) = ec2.wait_booted([instance["InstanceId"]])
        namespace = ec2.lan.namespaces[index]
        assert ec2.endpoint_url in os.environ["AIRFLOW_CONN_AWS_DEFAULT"]
        # its instance is left running on purpose: the harness's close removes its host
    assert not Path(f"/run/netns/{namespace}").exists()
    assert os.environ.get("AIRFLOW_CONN_AWS_DEFAULT") == before
