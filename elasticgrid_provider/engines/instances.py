"""Cloud instances behind a small interface: run, find by tag, terminate.

:class:`InstanceApi` is all an engine needs of a cloud, so a GCE engine can follow the ec2
one; :class:`Ec2Instances` is the EC2 implementation, its boto3 client built on first use.
:func:`terminate_tagged` is how every path that ends a part ends its instances: found by tag,
never from a list kept in memory. The rules: docs/clouds.md ("What it costs when things
fail: nothing left running").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any, Protocol

from elasticgrid_provider.core.errors import CloudApiError, CloudCapacityError, InstancesLeftError
from elasticgrid_provider.core.machines import Machine, Market

log = logging.getLogger(__name__)

CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientHostCapacity",
        "InsufficientReservedInstanceCapacity",
        "InsufficientFreeAddressesInSubnet",
        "InsufficientAddressCapacity",
        "MaxSpotInstanceCountExceeded",
        "SpotMaxPriceTooLow",
        "InstanceLimitExceeded",
        "VcpuLimitExceeded",
        "Unsupported",  # an instance type a zone does not offer (right now)
    }
)
"""EC2 error codes that mean the cloud has no room for the request (not a bad request)."""
ENDED_STATES = frozenset({"terminated"})
ENDING = frozenset({"shutting-down", "terminated"})  # asked to terminate already
LIVE_STATES = ("pending", "running", "stopping", "stopped")  # what may still cost
GONE_STATES = frozenset({"shutting-down", "terminated", "stopping", "stopped"})
TERMINATE_ATTEMPTS = 5
TERMINATE_BATCH = 500
STATUS_BATCH = 100  # instance ids per DescribeInstanceStatus
TERMINATE_BACKOFF_S = 1.0


@dataclass(frozen=True)
class Instance:
    """One instance as the cloud describes it."""

    instance_id: str
    instance_type: str
    market: Market
    zone: str
    state: str
    launched_at: str
    private_address: str
    public_address: str
    state_reason: str | None = None  # "<code>: <message>", e.g. Server.SpotInstanceTermination
    tags: Mapping[str, str] = field(default_factory=dict)

    @property
    def alive(self) -> bool:
        """Not terminated yet (what still costs, or may)."""
        return self.state not in ENDED_STATES

    def machine(self, address: str) -> Machine:
        """The machines-record entry of this instance (``address``: the one the worker uses)."""
        return Machine(
            instance_id=self.instance_id,
            instance_type=self.instance_type,
            market=self.market,
            zone=self.zone,
            state=self.state,
            launched_at=self.launched_at,
            address=address,
            state_reason=self.state_reason,
        )


@dataclass(frozen=True)
class RunRequest:
    """One RunInstances call for one instance (``client_token`` makes a retry return it)."""

    image_id: str
    instance_type: str
    key_name: str
    user_data: str
    tags: Mapping[str, str]
    client_token: str
    spot: bool
    subnet_id: str | None = None
    security_group_ids: tuple[str, ...] = ()
    iam_instance_profile: str | None = None


class InstanceApi(Protocol):
    """What an engine needs of a cloud's instances."""

    def run(self, request: RunRequest) -> list[Instance]:
        """Start the instance(s) of ``request``; raises CloudApiError/CloudCapacityError."""
        ...

    def describe(
        self,
        tags: Mapping[str, Sequence[str]],
        states: Sequence[str] | None = None,
        instance_ids: Sequence[str] | None = None,
    ) -> list[Instance]:
        """Every instance whose tag ``key`` has one of the values given for it, in one of
        ``states`` (None: all states), among ``instance_ids`` when given."""
        ...

    def tagged(self, key: str, values: Sequence[str]) -> dict[str, str]:
        """Instance id -> value of its tag ``key``, for every instance (any state) whose tag
        ``key`` has one of ``values``."""
        ...

    def states(self, instance_ids: Sequence[str]) -> dict[str, str]:
        """Instance id -> state name of these instances (one that is gone is left out)."""
        ...

    def terminate(self, instance_ids: Sequence[str]) -> dict[str, str]:
        """Ask the cloud to terminate these instances (raises CloudApiError); the state the
        cloud answered for each (``shutting-down``, ``terminated``, ...)."""
        ...


def _cloud_error(call: str, error: Any) -> CloudApiError:
    details = error.response.get("Error", {}) if hasattr(error, "response") else {}
    code, message = details.get("Code", "?"), details.get("Message", str(error))
    kind = CloudCapacityError if code in CAPACITY_CODES else CloudApiError
    failure = kind(f"EC2 {call} failed: {code}: {message}")
    failure.code = code  # type: ignore[attr-defined]
    return failure


class Ec2Instances:
    """:class:`InstanceApi` on EC2 through the Airflow connection ``aws_conn_id``."""

    def __init__(self, aws_conn_id: str, region: str | None = None) -> None:
        self.aws_conn_id = aws_conn_id
        self.region = region or None

    @cached_property
    def client(self) -> Any:
        """The boto3 EC2 client of the connection (region: ours if set, else the connection's;
        in a launcher, from what its task handed over: :mod:`.connection_material`)."""
        from elasticgrid_provider.engines.connection_material import ec2_client

        return ec2_client(self.aws_conn_id, self.region)

    def _call(self, name: str, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self.client, name)(**kwargs)
        except ClientError as error:
            raise _cloud_error(_call_name(name), error) from None
        except BotoCoreError as error:  # no endpoint, no credentials
            raise CloudApiError(f"EC2 {_call_name(name)} failed: {error}") from None

    def run(self, request: RunRequest) -> list[Instance]:
        tags = [{"Key": key, "Value": value} for key, value in request.tags.items()]
        kwargs: dict[str, Any] = {
            "ImageId": request.image_id,
            "InstanceType": request.instance_type,
            "KeyName": request.key_name,
            "MinCount": 1,
            "MaxCount": 1,
            "UserData": request.user_data,
            "ClientToken": request.client_token,
            "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}],
        }
        if request.subnet_id:
            kwargs["SubnetId"] = request.subnet_id
        if request.security_group_ids:
            kwargs["SecurityGroupIds"] = list(request.security_group_ids)
        if request.iam_instance_profile:
            key = "Arn" if request.iam_instance_profile.startswith("arn:") else "Name"
            kwargs["IamInstanceProfile"] = {key: request.iam_instance_profile}
        if request.spot:
            options = {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}
            kwargs["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": options}
        answer = self._call("run_instances", **kwargs)
        return [_instance(item) for item in answer.get("Instances", [])]

    def describe(
        self,
        tags: Mapping[str, Sequence[str]],
        states: Sequence[str] | None = None,
        instance_ids: Sequence[str] | None = None,
    ) -> list[Instance]:
        # ids, then the state, then the tags in the order given (launch_tags: narrowest
        # first): a server that tests filters in turn (moto) looks up an instance's tags once
        # per tag filter it reaches, so a filter that rejects early saves the later ones
        filters = [{"Name": "instance-id", "Values": list(instance_ids)}] if instance_ids else []
        filters += [{"Name": "instance-state-name", "Values": list(states)}] if states else []
        filters += [{"Name": f"tag:{key}", "Values": list(values)} for key, values in tags.items()]
        found: list[Instance] = []
        token: str | None = None
        while True:
            page_args: dict[str, Any] = {"Filters": filters, "MaxResults": 1000}
            if token:
                page_args["NextToken"] = token
            answer = self._call("describe_instances", **page_args)
            for reservation in answer.get("Reservations", []):
                found.extend(_instance(item) for item in reservation.get("Instances", []))
            token = answer.get("NextToken")
            if not token:
                return found

    def tagged(self, key: str, values: Sequence[str]) -> dict[str, str]:
        filters = [
            {"Name": "resource-type", "Values": ["instance"]},
            {"Name": "key", "Values": [key]},
            {"Name": "value", "Values": list(values)},
        ]
        found: dict[str, str] = {}
        token: str | None = None
        while True:
            page_args: dict[str, Any] = {"Filters": filters, "MaxResults": 1000}
            if token:
                page_args["NextToken"] = token
            answer = self._call("describe_tags", **page_args)
            found.update({str(tag["ResourceId"]): str(tag["Value"]) for tag in answer["Tags"]})
            token = answer.get("NextToken")
            if not token:
                return found

    def states(self, instance_ids: Sequence[str]) -> dict[str, str]:
        ids, found = list(instance_ids), {}
        for start in range(0, len(ids), STATUS_BATCH):
            chunk = ids[start : start + STATUS_BATCH]
            try:
                answer = self._call(
                    "describe_instance_status", InstanceIds=chunk, IncludeAllInstances=True
                )
                statuses = answer.get("InstanceStatuses", [])
                found.update(
                    {str(i["InstanceId"]): str(i["InstanceState"]["Name"]) for i in statuses}
                )
            except CloudApiError as error:
                if getattr(error, "code", None) != "InvalidInstanceID.NotFound":
                    raise
                # one of them is gone already: a filter answers for those left, without error
                gone_safe = self.describe({}, instance_ids=chunk)
                found.update({item.instance_id: item.state for item in gone_safe})
        return found

    def terminate(self, instance_ids: Sequence[str]) -> dict[str, str]:
        ids, states = list(instance_ids), {}
        for start in range(0, len(ids), TERMINATE_BATCH):  # one call per batch of ids
            answer = self._call(
                "terminate_instances", InstanceIds=ids[start : start + TERMINATE_BATCH]
            )
            for item in answer.get("TerminatingInstances", []):
                states[str(item["InstanceId"])] = str((item.get("CurrentState") or {}).get("Name"))
        return states


def _call_name(method: str) -> str:
    return "".join(word.capitalize() for word in method.split("_"))


def _instance(item: Mapping[str, Any]) -> Instance:
    reason = item.get("StateReason") or {}
    code = reason.get("Code")
    launched = item.get("LaunchTime")
    return Instance(
        instance_id=str(item["InstanceId"]),
        instance_type=str(item.get("InstanceType", "")),
        market=Market.SPOT if item.get("InstanceLifecycle") == "spot" else Market.ON_DEMAND,
        zone=str((item.get("Placement") or {}).get("AvailabilityZone", "")),
        state=str((item.get("State") or {}).get("Name", "")),
        launched_at=launched.isoformat() if isinstance(launched, datetime) else str(launched or ""),
        private_address=str(item.get("PrivateIpAddress") or ""),
        public_address=str(item.get("PublicIpAddress") or ""),
        state_reason=f"{code}: {reason.get('Message', '')}" if code else None,
        tags={tag["Key"]: tag["Value"] for tag in item.get("Tags", [])},
    )


def terminate_tagged(
    api: InstanceApi,
    tags: Mapping[str, Sequence[str]],
    what: str,
    *,
    attempts: int = TERMINATE_ATTEMPTS,
    backoff_s: float = TERMINATE_BACKOFF_S,
    sleep: Callable[[float], None] = time.sleep,
    found_alive: Sequence[str] | None = None,
) -> list[str]:
    """Terminate every live instance with these ``tags`` (``what`` names them in logs and
    errors), retrying with doubling backoff; the ids terminated. ``found_alive``: the ids a
    describe by these tags just found (the first look is skipped). TerminateInstances answers
    each instance's new state: when every one is ending, that answer is the confirmation (no
    second look); otherwise the next try looks again by tag. Raises
    :class:`InstancesLeftError` naming the ids still alive after ``attempts`` tries."""
    ended: list[str] = []
    last_error: Exception | None = None
    alive: list[str] = []
    for attempt in range(attempts + 1):
        try:
            if attempt == 0 and found_alive is not None:
                alive = list(found_alive)
            else:
                found = api.describe(tags, LIVE_STATES)
                alive = [item.instance_id for item in found if item.state not in ENDING]
            if not alive:
                return ended
            if attempt == attempts:
                break  # the last look: still alive after every try
            if attempt:  # asked before and still alive: give the cloud time
                sleep(backoff_s * 2 ** (attempt - 1))
            answered = api.terminate(alive)
            log.info("Terminating %s: %s.", what, ", ".join(alive))
            ended.extend(instance for instance in alive if instance not in ended)
            last_error = None
            if all(answered.get(instance) in ENDING for instance in alive):
                return ended  # the cloud confirmed each one is ending
        except CloudApiError as error:
            last_error = error
            log.warning(
                "Terminating %s failed (try %d of %d): %s", what, attempt + 1, attempts, error
            )
            if attempt < attempts:
                sleep(backoff_s * 2**attempt)
    names = ", ".join(sorted(alive)) if alive else "unknown (they could not be listed)"
    cause = f": {last_error}" if last_error else ""
    raise InstancesLeftError(
        f"{what} could not be terminated after {attempts} tries; still alive: {names}{cause}"
    )


def live(instances: Iterable[Instance]) -> list[Instance]:
    """The instances not terminated yet."""
    return [instance for instance in instances if instance.alive]
