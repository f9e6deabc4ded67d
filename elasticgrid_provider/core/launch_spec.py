"""Render a placement into iroh-tinker launch specs.

iroh-tinker's ``JobManager.launch`` runs the *whole* job on the first ``resources.infra``
target that provisions, so a placement is launched as **parts**: one iroh-tinker job per
provider share, named ``<job>--<provider>``, each with only its own engine target, all sharing
one fresh rendezvous (:mod:`elasticgrid_provider.core.rendezvous`), each telling its ranks where
they sit in the global job (:mod:`elasticgrid_provider.core.rank_environment`). The rules of a
part (names, a fresh rendezvous per launch, params, reserved variables, refused engines):
docs/operators.md ("Parts").

Pure: no Airflow, and iroh_tinker (which pulls numpy) only inside the functions that validate
a spec (Airflow parses importers every few seconds).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AfterValidator, Field, PlainValidator

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.placement import Assignment, Placement
from elasticgrid_provider.core.providers import Provider
from elasticgrid_provider.core.rank_environment import (
    ELASTICGRID_ENV_NAMES,
    ENV_JOB,
    ENV_LAUNCH_ID,
    ENV_PART,
    ENV_PROCS_PER_NODE,
    ENV_RANK_OFFSET,
    ENV_SHARED_DIR,
    ENV_WORLD_SIZE,
    IROH_RUNNER_ENV_NAMES,
)
from elasticgrid_provider.core.rendezvous import parse_rendezvous
from elasticgrid_provider.core.validation import (
    Choice,
    JsonModel,
    Positive,
    Text,
    check_mapping,
    check_text,
    choice,
    model,
    whole,
)

if TYPE_CHECKING:
    from iroh_tinker.cloud.spec import LaunchSpec

PART_SEPARATOR = "--"  # joins the job name and the provider name into a part name

MAX_NAME_LENGTH = 128
_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_ENV_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class RecoveryMode(Choice):
    """What iroh-tinker does when a rank dies: restart the ranks, or let the job fail."""

    RESTART = "restart"
    NONE = "none"


def check_job_name(name: Any) -> str:
    """Return ``name`` if it is a valid job name (docs/operators.md, "Parts"), or raise."""
    check_text("job name", name)
    if not _NAME_PATTERN.fullmatch(name) or len(name) > MAX_NAME_LENGTH:
        raise ElasticGridError(
            f"job name must be 1-{MAX_NAME_LENGTH} characters of letters, digits, '.', '_' "
            f"or '-', starting with a letter or digit, got {name!r}"
        )
    if PART_SEPARATOR in name:
        raise ElasticGridError(
            f"job name must not contain {PART_SEPARATOR!r} (it separates job and provider "
            f"in part names), got {name!r}"
        )
    return name


def part_name(job_name: str, provider: Provider) -> str:
    """``<job>--<provider name>``: the iroh-tinker job name of one provider's share."""
    check_job_name(job_name)
    if not _NAME_PATTERN.fullmatch(provider.name):
        raise ElasticGridError(
            f"provider name must be letters, digits, '.', '_' or '-', starting with a letter "
            f"or digit, to name a launch part, got {provider.name!r}"
        )
    name = f"{job_name}{PART_SEPARATOR}{provider.name}"
    if len(name) > 2 * MAX_NAME_LENGTH:
        raise ElasticGridError(f"part name is too long, got {name!r}")
    return name


def rendezvous_spec_fields(uri: Any) -> dict[str, str]:
    """A rendezvous URI as iroh-tinker ``RendezvousSpec`` fields (rules in :mod:`.rendezvous`)."""
    return parse_rendezvous(uri).spec_fields()


def _check_envs(envs: Any) -> dict[str, str]:
    checked: dict[str, str] = {}
    for key, value in check_mapping("envs", envs).items():
        if not isinstance(key, str) or not _ENV_NAME_PATTERN.fullmatch(key):
            raise ElasticGridError(f"envs name must be a valid variable name, got {key!r}")
        if key in ELASTICGRID_ENV_NAMES or key in IROH_RUNNER_ENV_NAMES:
            raise ElasticGridError(f"envs must not set {key!r}: the launch sets it itself")
        checked[key] = check_text(f"envs {key}", value, allow_empty=True)
    return checked


def _known_rendezvous(uri: str) -> str:
    parse_rendezvous(uri)  # refuses an unknown scheme
    return uri


def _unset(value: Any) -> bool:
    return value is None


_LeftOutOrCount = Annotated[int | None, whole()]  # a Count that may be left out (null is refused)


@model
class _Recovery(JsonModel):
    """``options.recovery``: iroh-tinker's ``RecoverySpec`` fields (unset ones left out)."""

    mode: Annotated[str, choice(RecoveryMode)] = RecoveryMode.RESTART
    max_restarts: _LeftOutOrCount = Field(default=None, exclude_if=_unset)
    signal_grace_s: _LeftOutOrCount = Field(default=None, exclude_if=_unset)


@model
class _Checkpoint(JsonModel):
    """``options.checkpoint``: iroh-tinker's ``CheckpointSpec`` fields (unset ones left out)."""

    uri: Text | None = Field(default=None, exclude_if=_unset)
    interval_steps: _LeftOutOrCount = Field(default=None, exclude_if=_unset)


def _read_only(check: Callable[[Any], Any]) -> PlainValidator:
    """A mapping field (any mapping, copied) checked by ``check`` and stored read-only."""

    def stored(value: Any) -> Mapping[str, Any]:
        checked = check(dict(value) if isinstance(value, Mapping) else value)
        return MappingProxyType(checked.model_dump() if isinstance(checked, JsonModel) else checked)

    return PlainValidator(stored)


@model
class LaunchOptions(JsonModel):
    """What to run and how, independent of where: everything a spec needs but the placement.

    ``envs``, ``recovery`` and ``checkpoint`` are read-only mappings, outside the hash;
    ``rendezvous`` must be fresh for every launch.
    """

    OWNER = "launch options"

    run: Text
    workdir: Text = "."
    procs_per_node: Positive = 1
    backend: Text = "numpy"
    envs: Annotated[Mapping[str, str], _read_only(_check_envs)] = field(
        default_factory=lambda: MappingProxyType({}), hash=False
    )
    setup: Text | None = None
    rendezvous: Annotated[Text, AfterValidator(_known_rendezvous)] | None = None
    recovery: Annotated[Mapping[str, Any], _read_only(_Recovery.model_validate)] | None = field(
        default=None, hash=False
    )
    checkpoint: Annotated[Mapping[str, Any], _read_only(_Checkpoint.model_validate)] | None = field(
        default=None, hash=False
    )
    instance_type: Text | None = None
    shared_dir: Text | None = None
    launch_id: Text | None = None


def _checked(placement: Any, name: str, options: Any) -> tuple[Placement, LaunchOptions, int]:
    """A launch's inputs, checked (a non-empty placement of launchable providers, options, a
    job name); its world size."""
    if not isinstance(placement, Placement):
        raise ElasticGridError(f"placement must be a Placement, got {placement!r}")
    if placement.total_nodes < 1:
        raise ElasticGridError("placement is empty (0 nodes): there is nothing to launch")
    if not isinstance(options, LaunchOptions):
        raise ElasticGridError(f"options must be LaunchOptions, got {options!r}")
    check_job_name(name)
    if placement.launch_refusals:
        raise ElasticGridError(placement.launch_refusals[0])
    return placement, options, placement.total_nodes * options.procs_per_node


def _engine_params(provider: Provider, part: str, nodes: int) -> dict[str, Any]:
    """The part's ``resources.params``: the provider's, scoped to the part (an SSH provider's
    hosts of its own nodes, ``remote_dir`` under the part's name; docs/operators.md, "Parts")."""
    params = dict(provider.params)
    if provider.runs_on_ec2 and params.get("remote_dir"):
        params["remote_dir"] = f"{str(params['remote_dir']).rstrip('/')}/{part}"
    if not provider.runs_on_ssh_hosts:
        return params
    from elasticgrid_provider.core.ssh_params import SshParams

    ssh = SshParams.from_provider(provider.name, params, provider.max_nodes)
    params["hosts"] = list(ssh.node_hosts(provider.max_nodes)[:nodes])
    if ssh.remote_dir:
        params["remote_dir"] = f"{ssh.remote_dir.rstrip('/')}/{part}"
    return params


def _spec_dict(
    options: LaunchOptions,
    job: str,
    part: str,
    shares: Sequence[Assignment],
    rank_offset: int,
    world_size: int,
) -> dict[str, Any]:
    """The plain JSON document ``spec_from_dict`` reads to run ``shares`` (in failover order)
    as ``part`` of ``job``, from global rank ``rank_offset``; iroh defaults fill the rest."""
    providers = [share.provider for share in shares]
    resources: dict[str, Any] = {
        "infra": list(dict.fromkeys(provider.engine_target for provider in providers)),
        "use_spot": any(provider.spot for provider in providers),
    }
    if instance_type := options.instance_type or providers[0].accelerator:
        resources["instance_type"] = instance_type
    if params := _engine_params(providers[0], part, sum(share.nodes for share in shares)):
        resources["params"] = params
    envs = {
        **options.envs,
        ENV_JOB: job,
        ENV_PART: part,
        ENV_RANK_OFFSET: str(rank_offset),
        ENV_WORLD_SIZE: str(world_size),
        ENV_PROCS_PER_NODE: str(options.procs_per_node),
    }
    optional = {ENV_SHARED_DIR: options.shared_dir, ENV_LAUNCH_ID: options.launch_id}
    envs.update({name: value for name, value in optional.items() if value is not None})
    spec: dict[str, Any] = {
        "name": part,
        "run": options.run,
        "workdir": options.workdir,
        "num_nodes": sum(share.nodes for share in shares),
        "procs_per_node": options.procs_per_node,
        "backend": options.backend,
        "envs": envs,
        "resources": resources,
    }
    if options.setup is not None:
        spec["setup"] = options.setup
    if options.rendezvous is not None:
        spec["rendezvous"] = rendezvous_spec_fields(options.rendezvous)
    if options.recovery is not None:
        spec["recovery"] = dict(options.recovery)
    if options.checkpoint is not None:
        spec["checkpoint"] = dict(options.checkpoint)
    return spec


def validate_spec_dict(spec: dict[str, Any]) -> LaunchSpec:
    """An iroh-tinker ``LaunchSpec`` by ``spec_from_dict``; its complaint names the spec."""
    from iroh_tinker.cloud.spec import spec_from_dict

    try:
        return spec_from_dict(spec)
    except (TypeError, ValueError) as exc:
        raise ElasticGridError(f"launch spec {spec.get('name')!r} is invalid: {exc}") from exc


@dataclass(frozen=True)
class LaunchPart:
    """One provider's share of a job, as one iroh-tinker job: ``spec_json`` is its launch spec
    as canonical JSON (hashable); ``rank_offset`` is the global rank of its first process."""

    job_name: str
    part_name: str
    provider: Provider
    nodes: int
    rank_offset: int
    world_size: int
    spec_json: str

    @property
    def spec_dict(self) -> dict[str, Any]:
        """The part's launch spec as a plain JSON dict (a new copy on every call)."""
        return json.loads(self.spec_json)

    @property
    def engine_target(self) -> str:
        """The single ``resources.infra`` entry of this part."""
        return self.provider.engine_target

    def to_launch_spec(self) -> LaunchSpec:
        """The validated iroh-tinker ``LaunchSpec`` (imports iroh_tinker)."""
        return validate_spec_dict(self.spec_dict)

    def write_spec(self, path: str | Path) -> Path:
        """Write the spec as JSON to ``path``, mode 0600 (it holds ``envs`` values)."""
        target = Path(path)
        if target.suffix.lower() != ".json":
            raise ElasticGridError(f"spec file must end in .json, got {str(target)!r}")
        descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            os.fchmod(handle.fileno(), 0o600)
            handle.write(json.dumps(self.spec_dict, indent=2) + "\n")
        return target


def build_launch_parts(
    placement: Placement, name: str, options: LaunchOptions
) -> tuple[LaunchPart, ...]:
    """Render one launch part per provider share, in failover order (docs/operators.md, "Parts"):
    global ranks are assigned in share order; every spec is validated with iroh-tinker."""
    placement, options, world_size = _checked(placement, name, options)
    if world_size > 1 and options.rendezvous is None:
        raise ElasticGridError(
            f"rendezvous is required to launch {world_size} processes in parts, got None"
        )
    parts: list[LaunchPart] = []
    rank_offset = 0
    for share in placement.assignments:
        provider = share.provider
        part = part_name(name, provider)
        if any(earlier.part_name == part for earlier in parts):
            raise ElasticGridError(
                f"placement lists provider {provider.name!r} more than once; parts need one share "
                "per provider"
            )
        spec = _spec_dict(options, name, part, [share], rank_offset, world_size)
        validate_spec_dict(spec)
        spec_json = json.dumps(spec, sort_keys=True)
        parts.append(
            LaunchPart(name, part, provider, share.nodes, rank_offset, world_size, spec_json)
        )
        rank_offset += share.nodes * options.procs_per_node
    return tuple(parts)


def shared_home(
    homes: Mapping[str, str | None], world_size: int, rendezvous: str | None
) -> str | None:
    """The folder every rank of a launch sees (checkpoints, a ``dir:`` rendezvous), or None.

    ``homes`` maps each provider of the placement to the job's folder that its nodes see: under
    the jobs root for engines on the Airflow worker's machine, under ``params.shared_dir`` for
    SSH hosts (None without one). A launch of several processes with no rendezvous of its own
    needs one folder for all of them; anything else is one sentence saying what to set.
    """
    distinct = set(homes.values())
    home = distinct.pop() if len(distinct) == 1 else None
    if home is not None or world_size == 1 or rendezvous is not None:
        return home
    described = ", ".join(
        f"{name!r} ({folder})" if folder else f"{name!r} (no params.shared_dir)"
        for name, folder in homes.items()
    )
    raise ElasticGridError(
        f"rendezvous is needed for {world_size} processes and providers {described} share no "
        "folder for one: give the SSH providers one params.shared_dir that all their hosts "
        "mount, or set rendezvous to an s3:// or gs:// URI"
    )
