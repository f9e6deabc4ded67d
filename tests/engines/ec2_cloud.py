"""A real EC2 API for the ec2 engine's tests: moto's server on loopback, reached through an
Airflow AWS connection (``AIRFLOW_CONN_<ID>`` with ``endpoint_url``), as a user's would be.

The cloud's own faults are played on moto's in-process backend (:meth:`MotoEc2.fail`): a
capacity error on the n-th RunInstances, a termination refused n times. Nothing of the
provider's code is replaced.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import requests
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models import ec2_backends

from tests.moto_server import SerialMotoServer

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's default account


@dataclass
class MotoEc2:
    """A started moto server with a VPC and a subnet, and the connection that reaches it."""

    endpoint: str
    subnet_id: str = ""
    conn_id: str = "aws_default"
    calls: dict[str, int] = field(default_factory=dict)

    @property
    def client(self) -> Any:
        return boto3.client(
            "ec2",
            region_name=REGION,
            endpoint_url=self.endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    @property
    def backend(self) -> Any:
        return ec2_backends[ACCOUNT][REGION]

    def instances(self, **filters: list[str]) -> list[dict[str, Any]]:
        """Every instance (all states), optionally filtered by tag."""
        found = []
        paginator = self.client.get_paginator("describe_instances")
        pages = paginator.paginate(
            Filters=[{"Name": f"tag:{key}", "Values": values} for key, values in filters.items()]
        )
        for page in pages:
            for reservation in page["Reservations"]:
                found.extend(reservation["Instances"])
        return found

    def not_terminated(self) -> list[str]:
        return [
            item["InstanceId"] for item in self.instances() if item["State"]["Name"] != "terminated"
        ]

    @contextmanager
    def fail(
        self, method: str, code: str, message: str, when: Callable[[int, dict[str, Any]], bool]
    ) -> Iterator[None]:
        """Make moto's backend ``method`` raise ``code``/``message`` on the calls ``when(n,
        kwargs)`` picks (n counts from 1)."""
        with cloud_fault(self.backend, self.calls, method, code, message, when):
            yield


@contextmanager
def cloud_fault(
    backend: Any,
    calls: dict[str, int],
    method: str,
    code: str,
    message: str,
    when: Callable[[int, dict[str, Any]], bool],
) -> Iterator[None]:
    """A fault of the cloud itself: moto's in-process EC2 ``backend`` answers ``method`` with
    AWS's error ``code``/``message`` on the calls ``when(n, kwargs)`` picks (n counts from 1,
    kept in ``calls``); nothing of the provider's code is replaced."""
    original = getattr(backend, method)
    lock = threading.Lock()

    def failing(*args: Any, **kwargs: Any) -> Any:
        with lock:
            calls[method] = count = calls.get(method, 0) + 1
        if when(count, kwargs):
            raise EC2ClientError(code, message)
        return original(*args, **kwargs)

    setattr(backend, method, failing)
    try:
        yield
    finally:
        delattr(backend, method)  # the class's method again


def part_params(cloud: MotoEc2, folder: Path, **extra: Any) -> dict[str, Any]:
    """An ec2 part's params on ``cloud``'s subnet (``extra`` on top), with a key file in
    ``folder`` that no host accepts: nothing here is ever reached over SSH."""
    key = folder / "id_ed25519"
    key.write_text("not a usable key")
    base = {
        "instance_type": "t3.micro",
        "image_id": "ami-12345678",
        "key_name": "eg",
        "ssh_key": str(key),
        "subnet_id": cloud.subnet_id,
        "ssh_user": "root",
        "boot_timeout_s": 3,
        "connect_timeout_s": 1,
        "shared_dir": "/srv/pool",
    }
    return {**base, **extra}


@contextmanager
def moto_ec2(monkeypatch: Any, conn_id: str = "aws_default") -> Iterator[MotoEc2]:
    """A moto server on 127.0.0.1 (a free port), reset, with a VPC and a subnet in an
    unroutable range (TEST-NET-1: an ssh to an instance never reaches a real host)."""
    server = SerialMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    cloud = MotoEc2(endpoint=f"http://{host}:{port}", conn_id=conn_id)
    try:
        requests.post(f"{cloud.endpoint}/moto-api/reset", timeout=30).raise_for_status()
        connection = {
            "conn_type": "aws",
            "login": "testing",
            "password": "testing",
            "extra": {"region_name": REGION, "endpoint_url": cloud.endpoint},
        }
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(connection))
        vpc = cloud.client.create_vpc(CidrBlock="192.0.2.0/24")["Vpc"]["VpcId"]
        subnet = cloud.client.create_subnet(VpcId=vpc, CidrBlock="192.0.2.0/24")
        cloud.subnet_id = subnet["Subnet"]["SubnetId"]
        yield cloud
    finally:
        server.stop()


def reclaim(cloud: MotoEc2, instance_id: str) -> None:
    """Play a spot interruption on moto's backend: the instance terminated by AWS."""
    from moto.ec2.models.instances import StateReason

    cloud.backend.terminate_instances([instance_id])
    instance = cloud.backend.get_instance(instance_id)
    instance.state_reason = StateReason(
        "Server.SpotInstanceTermination: Spot instance termination",
        "Server.SpotInstanceTermination",
    )
