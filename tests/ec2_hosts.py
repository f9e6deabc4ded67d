"""Fake EC2 virtual machines: a real moto server whose instances boot as SSH test hosts.

:class:`FakeEc2` starts ``moto``'s EC2 API (:mod:`tests.moto_server`) on 127.0.0.1 (a free
port), creates a VPC and a subnet on the free ``10.x.y.0/24`` of an
:class:`~tests.ssh_hosts.SshTestHosts` bridge (no host of its own), imports the
session key as the EC2 key pair ``key_name``, and runs a watcher thread that
polls DescribeInstances. Each ``running`` instance gets a network-namespace
host at its ``PrivateIpAddress``, configured the way cloud-init would: sshd's
host key is the ``ed25519_private`` of the user data's ``#cloud-config``
``ssh_keys`` (a user data without one gives a random key, so strict host key
checking against the engine's known_hosts fails), and root's
``authorized_keys`` holds the instance's key pair public key. An instance that
is stopped, terminated or gone loses its host (every process on it dies).

:meth:`FakeEc2.reclaim` is a spot interruption: on moto's in-process backend
the instance is terminated with state reason ``Server.SpotInstanceTermination``
and its host removed. ``answer=False`` makes instances never answer SSH (no
host starts), ``boot_delay_s`` delays each host as a slow boot would, ``moto_process=True``
runs moto in a process of its own (a benchmark's choice; no ``fail``/``reclaim`` then),
``serve_hosts=True`` serves it on the hosts' bridge, so that their ranks reach its S3 API
(:meth:`FakeEc2.s3_bucket`). Closing
removes every host, resets and stops the moto server. Root only, as the SSH
test hosts are.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from tests.ssh_hosts import POOL_MOUNT, SshTestHosts

REGION = "us-east-1"
ZONE = f"{REGION}a"
KEY_NAME = "elasticgrid-tests"
SPOT_REASON = "Server.SpotInstanceTermination"
_LIVE_STATES = ["pending", "running"]  # an instance in any other state has no host


def cloud_config_host_key(user_data: str | None) -> str | None:
    """The ``ssh_keys.ed25519_private`` of a ``#cloud-config`` user data, or None."""
    if not user_data or not user_data.startswith("#cloud-config"):
        return None
    document = yaml.safe_load(user_data) or {}
    keys = document.get("ssh_keys") if isinstance(document, dict) else None
    private = keys.get("ed25519_private") if isinstance(keys, dict) else None
    return private if isinstance(private, str) else None


class FakeEc2:
    """A moto EC2 API whose running instances are SSH hosts (a context manager; see the
    module docstring)."""

    def __init__(
        self,
        hide: Iterable[str | Path] = (),
        pool: str | Path | None = None,
        *,
        answer: bool = True,
        boot_delay_s: float = 0.0,
        poll_s: float = 0.1,
        set_connection: bool = True,
        moto_process: bool = False,
        serve_hosts: bool = False,
    ):
        self.lan = SshTestHosts(0, hide=hide, pool=pool)
        self.moto_process = moto_process  # moto in a process of its own: no fail(), reclaim()
        self.serve_hosts = serve_hosts  # moto on the hosts' bridge: ranks reach its S3 API
        self.answer = answer
        self.boot_delay_s = boot_delay_s
        self.poll_s = poll_s
        self.set_connection = set_connection
        self.endpoint_url = ""
        self.vpc_id = ""
        self.subnet_id = ""
        self.image_id = ""
        self.errors: list[str] = []
        self._server: Any = None
        self._client: Any = None
        self._hosts: dict[str, int] = {}  # instance id -> host index in self.lan
        self._first_seen: dict[str, float] = {}
        self.calls: dict[str, int] = {}  # moto backend calls counted by fail()
        self.booted_at: dict[str, float] = {}  # instance id -> monotonic time its host was up
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self._saved_connection: str | None = None

    # -- what tests pass to the engine ---------------------------------------------------------
    @property
    def key(self) -> str:
        """The private key file of the key pair ``KEY_NAME`` (the ``ssh_key`` param)."""
        return self.lan.key

    @property
    def connection(self) -> dict[str, Any]:
        """The Airflow AWS connection reaching the moto server (``AIRFLOW_CONN_*`` JSON)."""
        return {
            "conn_type": "aws",
            "login": "testing",
            "password": "testing",
            "extra": {"region_name": REGION, "endpoint_url": self.endpoint_url},
        }

    def params(self, **extra: Any) -> dict[str, Any]:
        """An ``ec2`` provider's ``params`` launching fake VMs (``extra`` on top)."""
        return {
            "instance_type": "t3.micro",
            "image_id": self.image_id,
            "subnet_id": self.subnet_id,
            "key_name": KEY_NAME,
            "ssh_key": self.key,
            "ssh_user": "root",
            "python": sys.executable,  # the hosts see this machine's interpreter
            "boot_timeout_s": 60,
            "shared_dir": f"{POOL_MOUNT}/eg",
            **extra,
        }

    def s3_bucket(self, name: str) -> dict[str, str]:
        """Create bucket ``name`` on the moto server; the environment a rank's boto3 needs to
        reach it (``serve_hosts=True``: the fake VMs' ranks reach the server too), as the
        ``envs`` of a launch give it (a real instance has its profile and AWS's endpoint)."""
        from tests.moto_server import aws_env

        self.s3().create_bucket(Bucket=name)
        return aws_env(self.endpoint_url)

    def s3(self) -> Any:
        """A boto3 S3 client of the moto server."""
        from tests.moto_server import s3_client

        return s3_client(self.endpoint_url)

    @property
    def client(self) -> Any:
        """A boto3 EC2 client of the moto server (what tests inspect instances with)."""
        return self._client

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> FakeEc2:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _start(self) -> None:
        import boto3

        from tests.moto_server import MotoProcess, SerialMotoServer

        self.lan.__enter__()
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per API call
        if self.moto_process:
            self._server = MotoProcess()
        else:
            # the bridge's own address is this machine's: the worker reaches it as the hosts do
            address = f"{self.lan.prefix}.1" if self.serve_hosts else "127.0.0.1"
            self._server = SerialMotoServer(ip_address=address, port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint_url = f"http://{host}:{port}"
        self._reset_moto()
        self._client = boto3.client(
            "ec2",
            region_name=REGION,
            endpoint_url=self.endpoint_url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        cidr = f"{self.lan.prefix}.0/24"
        self.vpc_id = self._client.create_vpc(CidrBlock=cidr)["Vpc"]["VpcId"]
        subnet = self._client.create_subnet(
            VpcId=self.vpc_id, CidrBlock=cidr, AvailabilityZone=ZONE
        )
        self.subnet_id = subnet["Subnet"]["SubnetId"]
        public = Path(f"{self.lan.key}.pub").read_bytes()
        self._client.import_key_pair(KeyName=KEY_NAME, PublicKeyMaterial=public)
        self.image_id = self._client.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        if self.set_connection:
            self._saved_connection = os.environ.get("AIRFLOW_CONN_AWS_DEFAULT")
            os.environ["AIRFLOW_CONN_AWS_DEFAULT"] = json.dumps(self.connection)
        self._watcher = threading.Thread(target=self._watch, name="fake-ec2-watcher", daemon=True)
        self._watcher.start()

    def _reset_moto(self) -> None:
        """Empty moto's in-process backends (they outlive a server within one process)."""
        request = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")
        with urllib.request.urlopen(request, timeout=30):
            pass

    def close(self) -> None:
        """Stop the watcher, remove every host, reset and stop moto, restore the connection."""
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=60)
            self._watcher = None
        with self._lock:
            self._hosts.clear()
        self.lan.close()
        if self._server is not None:
            with contextlib.suppress(Exception):
                self._reset_moto()
            self._server.stop()
            self._server = None
        if self.set_connection and self.endpoint_url:
            if self._saved_connection is None:
                os.environ.pop("AIRFLOW_CONN_AWS_DEFAULT", None)
            else:
                os.environ["AIRFLOW_CONN_AWS_DEFAULT"] = self._saved_connection

    # -- the watcher (cloud-init's part) --------------------------------------------------------
    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.sync()
            except Exception as error:  # recorded: tests assert none happened
                self.errors.append(f"{type(error).__name__}: {error}")

    def sync(self) -> None:
        """One watcher pass: hosts for new running instances (booted side by side, as a cloud
        boots them), none for the gone ones."""
        with self._lock:  # only the live ones: a test's terminated instances pile up in moto
            live = self.instances(**{"instance-state-name": _LIVE_STATES})
            seen = {instance["InstanceId"]: instance for instance in live}
            for instance_id in list(self._hosts):
                if instance_id not in seen:
                    self._remove(instance_id)
            booting = []
            for instance_id, instance in seen.items():
                if instance["State"]["Name"] != "running" or instance_id in self._hosts:
                    continue
                first = self._first_seen.setdefault(instance_id, time.monotonic())
                if not self.answer or time.monotonic() - first < self.boot_delay_s:
                    continue
                address = instance.get("PrivateIpAddress", "")
                if address.rpartition(".")[0] != self.lan.prefix:
                    self._first_seen[instance_id] = float("inf")  # not on our LAN: never boots
                    continue
                booting.append((instance_id, instance, address))
            if booting:
                self._boot(booting)

    def _boot(self, booting: list[tuple[str, dict[str, Any], str]]) -> None:
        """A host for each ``(instance id, instance, address)``, as cloud-init sets it up."""
        addresses = {address for _, _, address in booting}
        for other, index in list(self._hosts.items()):  # an address freed and given again
            if self.lan.addresses[index] in addresses:
                self._remove(other)
        # each instance's user data, and each key pair once, asked side by side
        key_names = sorted({i.get("KeyName") for _, i, _ in booting if i.get("KeyName")})
        with ThreadPoolExecutor(max_workers=min(8, len(booting) + len(key_names))) as pool:
            user_data = pool.map(self.user_data, [instance_id for instance_id, _, _ in booting])
            public_keys = dict(zip(key_names, pool.map(self._public_key, key_names), strict=True))
            hosts = [
                (
                    address,
                    cloud_config_host_key(text or None),
                    public_keys.get(i.get("KeyName"), ""),
                )
                for (_, i, address), text in zip(booting, user_data, strict=True)
            ]
        indexes = self.lan.add_hosts(hosts)
        for (instance_id, _, _), index in zip(booting, indexes, strict=True):
            self._hosts[instance_id] = index
            self.booted_at[instance_id] = time.monotonic()

    def _public_key(self, key_name: str) -> str:
        """The public key of EC2 key pair ``key_name`` ('' when it has none)."""
        pairs = self._client.describe_key_pairs(KeyNames=[key_name], IncludePublicKey=True)
        return (pairs["KeyPairs"][0].get("PublicKey") if pairs["KeyPairs"] else None) or ""

    def _remove(self, instance_id: str) -> None:
        index = self._hosts.pop(instance_id, None)
        if index is not None:
            self.lan.remove_host(index)

    # -- what tests read and do ---------------------------------------------------------------
    def instances(self, **filters: list[str]) -> list[dict[str, Any]]:
        """Every instance (all states; DescribeInstances paginated), ``filters`` as
        ``{"tag:elasticgrid:job": ["name"]}``."""
        found = []
        arguments: dict[str, Any] = {}
        if filters:
            arguments["Filters"] = [{"Name": k, "Values": v} for k, v in filters.items()]
        for page in self._client.get_paginator("describe_instances").paginate(**arguments):
            for reservation in page["Reservations"]:
                found.extend(reservation["Instances"])
        return found

    def alive(self) -> list[str]:
        """The ids of every instance not terminated."""
        return sorted(
            instance["InstanceId"]
            for instance in self.instances()
            if instance["State"]["Name"] != "terminated"
        )

    def user_data(self, instance_id: str) -> str:
        """The instance's user data as text ('' when none)."""
        answer = self._client.describe_instance_attribute(
            InstanceId=instance_id, Attribute="userData"
        )
        encoded = answer.get("UserData", {}).get("Value")
        return base64.b64decode(encoded).decode() if encoded else ""

    def boot_span(self, instance_ids: Iterable[str]) -> float:
        """Seconds from the first of these instances seen ``running`` until the last one's
        host was up: the fake cloud's own boot time (the hosts of one watcher pass start side
        by side)."""
        ids = list(instance_ids)
        with self._lock:
            return max(self.booted_at[i] for i in ids) - min(self._first_seen[i] for i in ids)

    def booted(self) -> dict[str, int]:
        """Each instance that has a host now: instance id -> host index in :attr:`lan`."""
        with self._lock:
            return dict(self._hosts)

    def host_index(self, instance_id: str) -> int | None:
        """The SSH test host index (in :attr:`lan`) of a booted instance, or None."""
        with self._lock:
            return self._hosts.get(instance_id)

    def wait_booted(self, instance_ids: Iterable[str], timeout: float = 60.0) -> list[int]:
        """Wait until each instance has a host whose sshd listens; return their indexes."""
        deadline = time.monotonic() + timeout
        indexes = []
        for instance_id in instance_ids:
            while (index := self.host_index(instance_id)) is None:
                if self.errors:
                    raise RuntimeError(f"fake EC2 watcher failed: {self.errors[-1]}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"instance {instance_id} got no host in {timeout}s")
                time.sleep(0.05)
            self.lan.wait_listening(index, max(1.0, deadline - time.monotonic()))
            indexes.append(index)
        return indexes

    def fail(
        self, method: str, code: str, message: str, when: Callable[[int, dict[str, Any]], bool]
    ) -> contextlib.AbstractContextManager[None]:
        """The cloud answering ``method`` (moto's backend method, e.g. ``run_instances``) with
        AWS's error ``code``/``message`` on the calls ``when(n, kwargs)`` picks, n counting
        from 1 (:attr:`calls`), while the block runs (:func:`tests.engines.ec2_cloud.cloud_fault`)."""
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.ec2.models import ec2_backends

        from tests.engines.ec2_cloud import cloud_fault

        self._in_process("fail")
        backend = ec2_backends[DEFAULT_ACCOUNT_ID][REGION]
        return cloud_fault(backend, self.calls, method, code, message, when)

    def _in_process(self, what: str) -> None:
        if self.moto_process:
            raise RuntimeError(f"{what}() reaches moto's in-process backend: not with moto_process")

    def reclaim(self, instance_id: str) -> None:
        """A spot interruption: terminate the instance on moto's in-process backend with state
        reason ``Server.SpotInstanceTermination``, and remove its host at once."""
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.ec2.models import ec2_backends
        from moto.ec2.models.instances import StateReason

        self._in_process("reclaim")
        with self._lock:
            instance = ec2_backends[DEFAULT_ACCOUNT_ID][REGION].get_instance(instance_id)
            instance.terminate()
            instance.state_reason = StateReason(
                f"{SPOT_REASON}: Spot instance termination", SPOT_REASON
            )
            self._remove(instance_id)


# -- what tests watch and check -----------------------------------------------------------


class Watch:
    """What a thread saw while a test ran: hosts' command lines and live instances per poll."""

    def __init__(self) -> None:
        self.command_lines: list[str] = []
        self.duplicates: list[str] = []
        self.most_alive = 0
        self.errors: list[str] = []


def _poll(ec2: FakeEc2, watch: Watch) -> None:
    alive = [i for i in ec2.instances() if i["State"]["Name"] != "terminated"]
    watch.most_alive = max(watch.most_alive, len(alive))
    # launch, part and Name (<part>-<index>): one live instance per slot, ever
    keys = Counter(tuple(sorted((t["Key"], t["Value"]) for t in i.get("Tags", ()))) for i in alive)
    watch.duplicates.extend(str(key) for key, count in keys.items() if count > 1)
    for index in ec2.booted().values():
        listing = ec2.lan.run(index, "ps -eo args", timeout=10)
        if listing.returncode == 0:
            watch.command_lines.append(listing.stdout)


@contextmanager
def watching(ec2: FakeEc2) -> Iterator[Watch]:
    """Poll the instances and the hosts' command lines until the block ends."""
    watch, stop = Watch(), threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                _poll(ec2, watch)
            except Exception as error:  # a host removed mid-call: recorded, asserted empty
                watch.errors.append(repr(error))
            stop.wait(0.2)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield watch
    finally:
        stop.set()
        thread.join(timeout=60)


def assert_nothing_left(ec2: FakeEc2, token: str) -> None:
    """Zero instances not terminated; the token in no instance's user data."""
    assert ec2.alive() == []
    for instance in ec2.instances():
        user_data = ec2.user_data(instance["InstanceId"])
        assert user_data.startswith("#cloud-config\n")
        assert token not in user_data
        tags = {tag["Key"]: tag["Value"] for tag in instance.get("Tags", ())}
        assert {"elasticgrid:job", "elasticgrid:part", "elasticgrid:launch", "Name"} <= set(tags)
        assert token not in json.dumps(tags)
    assert ec2.errors == []
