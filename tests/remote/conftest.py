"""Fixtures of the tests on SSH hosts: namespace hosts as the ``elasticgrid_ssh`` grid.

Every grid points the ``elasticgrid_ssh`` connection at hosts that cannot see
the worker's jobs root and share one pool folder, mounted at ``/srv/pool`` (the
providers' ``shared_dir``), as an on-prem pool with NFS would.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ec2_hosts import FakeEc2
from tests.moto_server import S3_BUCKET
from tests.ssh_hosts import POOL_MOUNT, SshTestHosts

SHARED_DIR = f"{POOL_MOUNT}/eg"
# lists, on a host, every process of a job: pid and launch id, from its environment
_JOB_PROCESSES = (
    "python3 -c 'import os, sys\n"
    'for pid in filter(str.isdigit, os.listdir("/proc")):\n'
    '    try: raw = open(f"/proc/{pid}/environ", "rb").read()\n'
    "    except OSError: continue\n"
    '    env = dict(i.split(b"=", 1) for i in raw.split(b"\\0") if b"=" in i)\n'
    '    if env.get(b"ELASTICGRID_JOB") == sys.argv[1].encode():\n'
    '        print(pid, env.get(b"ELASTICGRID_LAUNCH_ID", b"").decode())\''
)


def use_grid(
    monkeypatch: pytest.MonkeyPatch, jobs_root: Path, grid: list[dict], conn: str = "ssh"
) -> None:
    """Point the ``elasticgrid_<conn>`` connection at ``grid`` and the test's jobs root."""
    extra = {"jobs_root": str(jobs_root), "providers": grid}
    connection = {"conn_type": "elasticgrid", "extra": extra}
    monkeypatch.setenv(f"AIRFLOW_CONN_ELASTICGRID_{conn.upper()}", json.dumps(connection))


def ec2_provider(
    name: str, ec2: FakeEc2, max_nodes: int, cost: float = 1.0, spot: bool = True
) -> dict:
    """An ``ec2`` provider of ``max_nodes`` fake VMs (one node each)."""
    return {
        "name": name,
        "engine": "ec2",
        "region": "us-east-1",
        "max_nodes": max_nodes,
        "cost_per_node_hour": cost,
        "spot": spot,
        "params": ec2.params(shared_dir=SHARED_DIR),
    }


def ssh_provider(name: str, hosts: SshTestHosts, members: list[str], cost: float = 0.0) -> dict:
    """A provider of one node per host in ``members``."""
    return {
        "name": name,
        "engine": "ssh",
        "max_nodes": len(members),
        "cost_per_node_hour": cost,
        "spot": False,
        "params": {**hosts.params(shared_dir=SHARED_DIR), "hosts": members},
    }


def job_processes(hosts: SshTestHosts, index: int, job: str) -> dict[int, str]:
    """The processes of ``job`` on host ``index``: pid -> launch id."""
    listing = hosts.run(index, f"{_JOB_PROCESSES} {shlex.quote(job)}")
    assert listing.returncode == 0, listing.stderr
    pairs = (line.split(" ", 1) for line in listing.stdout.splitlines() if line.strip())
    return {int(pid): launch for pid, launch in pairs}


@pytest.fixture
def ssh_pool(
    jobs_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[SshTestHosts]:
    """Two SSH hosts as provider ``onprem`` (one node each)."""
    with SshTestHosts(2, hide=[jobs_root], pool=tmp_path / "pool") as hosts:
        use_grid(monkeypatch, jobs_root, [ssh_provider("onprem", hosts, hosts.hosts)])
        yield hosts


@pytest.fixture
def two_pools(
    jobs_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[SshTestHosts]:
    """Providers ``pool-a`` (host 0, free) and ``pool-b`` (host 1), sharing one pool folder."""
    with SshTestHosts(2, hide=[jobs_root], pool=tmp_path / "pool") as hosts:
        grid = [
            ssh_provider("pool-a", hosts, hosts.hosts[:1]),
            ssh_provider("pool-b", hosts, hosts.hosts[1:], cost=1.0),
        ]
        use_grid(monkeypatch, jobs_root, grid)
        yield hosts


@pytest.fixture
def ec2_pool(jobs_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeEc2]:
    """Fake EC2 VMs as provider ``aws`` (spot, up to 2 instances) of the ``elasticgrid_ec2``
    connection."""
    with FakeEc2(hide=[jobs_root], pool=tmp_path / "pool") as ec2:
        use_grid(monkeypatch, jobs_root, [ec2_provider("aws", ec2, 2)], "ec2")
        yield ec2


@pytest.fixture
def ec2_s3_pool(
    jobs_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FakeEc2]:
    """Fake EC2 VMs as provider ``aws`` (spot, up to 2 instances) whose ranks share no disk:
    they meet and checkpoint in S3 (bucket :data:`S3_BUCKET` on the moto server, which the
    VMs reach); the pool folder stays mounted, and unused."""
    with FakeEc2(hide=[jobs_root], pool=tmp_path / "pool", serve_hosts=True) as ec2:
        ec2.s3_bucket(S3_BUCKET)
        params = ec2.params(
            rendezvous=f"s3://{S3_BUCKET}/rendezvous",
            checkpoint_dir=f"s3://{S3_BUCKET}/checkpoints",
        )
        del params["shared_dir"]
        provider = {**ec2_provider("aws", ec2, 2), "params": params}
        use_grid(monkeypatch, jobs_root, [provider], "ec2")
        yield ec2


@pytest.fixture
def two_clouds(
    jobs_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FakeEc2]:
    """Providers ``spot`` (1 spot instance, cheap) and ``ondemand`` (1 on-demand instance)."""
    with FakeEc2(hide=[jobs_root], pool=tmp_path / "pool") as ec2:
        grid = [
            ec2_provider("spot", ec2, 1, cost=1.0),
            ec2_provider("ondemand", ec2, 1, cost=3.0, spot=False),
        ]
        use_grid(monkeypatch, jobs_root, grid, "ec2")
        yield ec2
