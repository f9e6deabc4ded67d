"""A provider's ``params`` for the ec2 engine: which instances, how to reach them, where to run.

:class:`Ec2Params` (``engine: "ec2"``; the provider's own ``region``, ``spot`` and
``max_nodes`` apply): the AWS connection, the instances (type, image, key pair, subnet,
security groups, instance profile, tags, user data), how the worker reaches them (the key pair's
private key as ``ssh_key`` or ``ssh_conn_id``, user, address, timeouts), the spot fallback and
its price, and where a multi-instance part's ranks meet and keep checkpoints. Each field, its
meaning and default: docs/clouds.md ("Params"). A bad one fails in one sentence naming the
provider and the field, before anything is created. Pure: pydantic only, no network;
:meth:`Ec2Params.from_provider` also checks that the ``ssh_key`` file can be read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer, PlainValidator

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.ssh_params import _readable_file, parse_engine_params
from elasticgrid_provider.core.validation import (
    AboveZero,
    Choice,
    JsonModel,
    NonNegative,
    Text,
    choice,
    model,
)

DEFAULT_AWS_CONN_ID = "aws_default"
RESERVED_TAG_PREFIXES = ("elasticgrid:", "aws:")
TAG_JOB, TAG_PART, TAG_LAUNCH = "elasticgrid:job", "elasticgrid:part", "elasticgrid:launch"
"""The tags on every instance: what finds them again (never a list kept in memory)."""


class SpotFallback(Choice):
    """What a spot request that finds no capacity does."""

    NONE = "none"  # fail the part: the provider has no room
    ON_DEMAND = "on_demand"  # retry on-demand at on_demand_cost_per_node_hour


class AddressKind(Choice):
    """Which address of an instance the worker connects to."""

    PRIVATE = "private"
    PUBLIC = "public"


def _string_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, (list, tuple)) and all(isinstance(item, str) and item for item in value):
        return tuple(value)
    raise ValueError(f"must be a list of non-empty strings, got {value!r}")


def _tags(value: Any) -> Mapping[str, str]:
    if not isinstance(value, Mapping) or not all(
        isinstance(key, str) and key and isinstance(item, str) for key, item in value.items()
    ):
        raise ValueError(f"must be a JSON object of strings, got {value!r}")
    for key in value:
        if key == "Name" or key.lower().startswith(RESERVED_TAG_PREFIXES):
            raise ValueError(f"must not set the tag {key!r}: the engine sets it itself")
    return MappingProxyType(dict(value))


def _user_data(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        raise ValueError(f"must be a JSON object of #cloud-config keys, got {value!r}")
    if "ssh_keys" in value:
        raise ValueError("must not set 'ssh_keys': the engine gives each launch its host key")
    return MappingProxyType(dict(value))


def _s3_uri(value: Any) -> str:
    if not isinstance(value, str) or not value.startswith("s3://") or len(value) <= len("s3://"):
        raise ValueError(f"must be an 's3://bucket[/prefix]' URI, got {value!r}")
    return value


StringList = Annotated[tuple[str, ...], BeforeValidator(_string_list)]
Tags = Annotated[Mapping[str, str], PlainValidator(_tags), PlainSerializer(dict)]
UserData = Annotated[Mapping[str, Any], PlainValidator(_user_data), PlainSerializer(dict)]
S3Uri = Annotated[str, BeforeValidator(_s3_uri)]


@model
class Ec2Params(JsonModel):
    """A provider's ec2 engine parameters (docs/clouds.md, "Params")."""

    instance_type: Text
    image_id: Text
    key_name: Text
    aws_conn_id: Text = DEFAULT_AWS_CONN_ID
    subnet_id: Text | None = None
    security_group_ids: StringList = ()
    ssh_key: Text | None = None
    ssh_conn_id: Text | None = None
    ssh_user: Text = "ubuntu"
    python: Text = "python3"
    remote_dir: Text | None = None
    connect_timeout_s: AboveZero = 5.0
    boot_timeout_s: AboveZero = 300.0
    tags: Tags = field(default_factory=lambda: MappingProxyType({}), hash=False)
    iam_instance_profile: Text | None = None
    spot_fallback: Annotated[SpotFallback, choice(SpotFallback)] = SpotFallback.NONE
    on_demand_cost_per_node_hour: NonNegative | None = None
    address: Annotated[AddressKind, choice(AddressKind)] = AddressKind.PRIVATE
    user_data: UserData = field(default_factory=lambda: MappingProxyType({}), hash=False)
    rendezvous: S3Uri | None = None
    shared_dir: Text | None = None
    checkpoint_dir: Text | None = None

    @classmethod
    def parse(cls, params: Any, where: str = "resources.params") -> Ec2Params:
        """Validate a params mapping, or raise one sentence naming ``<where>.<field>``."""
        parsed = parse_engine_params(
            cls,
            params,
            where,
            {
                "instance_type": "the EC2 instance type, e.g. 'g5.xlarge'",
                "image_id": "an AMI with Python and iroh-tinker installed",
                "key_name": "the EC2 key pair whose private key ssh_key or ssh_conn_id holds",
            },
        )
        parsed.check_rules(where)
        return parsed

    def check_rules(self, where: str) -> None:
        """The rules between fields (one sentence naming the field)."""
        if (self.ssh_key is None) == (self.ssh_conn_id is None):
            raise ElasticGridError(
                f"{where} must give exactly one of ssh_key (a private key file on the "
                "worker) or ssh_conn_id (an Airflow SSH connection holding it)"
            )
        if (
            self.spot_fallback is SpotFallback.ON_DEMAND
            and self.on_demand_cost_per_node_hour is None
        ):
            raise ElasticGridError(
                f"{where} is missing the field 'on_demand_cost_per_node_hour' (spot_fallback "
                "'on_demand' must name the on-demand price, which the plan shows)"
            )
        checkpoint = self.checkpoint_dir
        if checkpoint is not None and not checkpoint.startswith("s3://"):
            inside = self.shared_dir is not None and _is_under(checkpoint, self.shared_dir)
            if not inside:
                raise ElasticGridError(
                    f"{where}.checkpoint_dir must be an 's3://' URI or a folder under "
                    f"shared_dir ({self.shared_dir!r}), got {checkpoint!r}"
                )

    @classmethod
    def from_provider(cls, provider_name: str, params: Any) -> Ec2Params:
        """The params of provider ``provider_name``, checked in full (the ``ssh_key`` file
        too)."""
        where = f"provider {provider_name!r} params"
        parsed = cls.parse(params, where)
        if parsed.ssh_key is not None and not _readable_file(parsed.ssh_key):
            raise ElasticGridError(
                f"{where}.ssh_key names a file that cannot be read: {parsed.ssh_key!r}"
            )
        return parsed

    def remote_root(self, part_name: str) -> str:
        """The ranks' working directory on every instance (as the ssh engine's)."""
        return self.remote_dir or f"~/elasticgrid/{part_name}"

    @property
    def can_fall_back(self) -> bool:
        """Whether a spot request without capacity retries on-demand."""
        return self.spot_fallback is SpotFallback.ON_DEMAND

    def has_rendezvous(self) -> bool:
        """Whether the ranks of several instances can find each other without Airflow's disk."""
        return self.rendezvous is not None or self.shared_dir is not None


def _is_under(path: str, folder: str) -> bool:
    child, parent = Path(os.path.normpath(path)), Path(os.path.normpath(folder))
    return child == parent or parent in child.parents
