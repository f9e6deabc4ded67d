"""Providers: the places a job's nodes can run.

A provider is one pool of nodes at one price: a cloud region, an on-prem pool, this
machine. Its ``engine`` (its name unless set) is the iroh-tinker engine that provisions
it, so several providers can map to one engine, which is how tests run a multi-provider
placement here. The rules: docs/connection.md ("The grid", "Engines").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import (
    Field,
    PlainSerializer,
    PlainValidator,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.validation import (
    AnyText,
    Count,
    Flag,
    JsonModel,
    NonNegative,
    Text,
    check_mapping,
    model,
)

SSH_ENGINE = "ssh"
"""The engine name of hosts reached over SSH: the provider's own engine, loaded by reference."""
EC2_ENGINE = "ec2"
"""The engine name of EC2 instances the provider's own engine starts and terminates."""
ENGINE_REFERENCES = {
    SSH_ENGINE: "module=elasticgrid_provider.engines.ssh:SshEngine",
    EC2_ENGINE: "module=elasticgrid_provider.engines.ec2:Ec2Engine",
}
"""Engine names that iroh-tinker loads from this package rather than its own registry."""
IROH_CLOUD_ENGINES = {"aws": "AWS", "gcp": "GCP", "azure": "Azure"}
"""iroh-tinker's own cloud engines, and their clouds: never launched, since they shell out to
the cloud's CLI and leave instances running when a launch fails (docs/connection.md)."""
PRODUCT_ENGINES = {"aws": EC2_ENGINE}
"""The engine of this package that replaces iroh-tinker's own for a cloud (docs/clouds.md)."""
_IROH_ENGINE_MODULES = "module=iroh_tinker.cloud.engines."


def _read_only_params(value: Any) -> Mapping[str, Any]:
    """``params``: a JSON object, stored read-only (a provider is hashable and frozen)."""
    if isinstance(value, Mapping) and all(isinstance(key, str) for key in value):
        return MappingProxyType(dict(value))
    raise ElasticGridError(f"params must be a JSON object, got {value!r}")


@model
class Provider(JsonModel):
    """One pool of nodes with a capacity, a price per node-hour and a spot flag."""

    name: Text
    max_nodes: Count
    cost_per_node_hour: NonNegative
    region: AnyText = ""
    accelerator: AnyText | None = None
    spot: Flag = True
    engine: Text | None = Field(default=None, validate_default=True)
    params: Annotated[
        Mapping[str, Any],
        PlainValidator(_read_only_params),
        PlainSerializer(dict),
        WithJsonSchema({"type": "object"}),
        Field(exclude_if=lambda params: not params),
    ] = dataclasses.field(default_factory=lambda: MappingProxyType({}), hash=False)

    @classmethod
    def _where(cls, data: Any) -> str:
        name = data.get("name") if isinstance(data, dict) else None
        return f"provider {name!r}" if isinstance(name, str) and name.strip() else "provider"

    @field_validator("engine")
    @classmethod
    def _engine_defaults_to_name(cls, engine: str | None, info: ValidationInfo) -> str | None:
        return info.data.get("name") if engine is None else engine

    @model_validator(mode="after")
    def _engine_params(self) -> Provider:
        """An SSH or EC2 provider's params are checked here, so a bad one fails the plan, not
        the launch (an EC2 provider without params plans; its engine refuses to provision)."""
        if self.engine_name == SSH_ENGINE:
            from elasticgrid_provider.core.ssh_params import SshParams

            SshParams.from_provider(self.name, dict(self.params), self.max_nodes)
        elif self.engine_name == EC2_ENGINE and self.params:
            from elasticgrid_provider.core.ec2_params import Ec2Params

            Ec2Params.from_provider(self.name, dict(self.params))
        return self

    @property
    def runs_on_ssh_hosts(self) -> bool:
        """Whether its nodes are machines reached over SSH (no folder shared with Airflow)."""
        return self.engine_name == SSH_ENGINE

    @property
    def runs_on_ec2(self) -> bool:
        """Whether its nodes are EC2 instances the ec2 engine starts (reached over SSH)."""
        return self.engine_name == EC2_ENGINE

    @property
    def fallback_cost_per_node_hour(self) -> float | None:
        """The on-demand price a spot request of this provider may fall back to (the ec2
        engine's ``spot_fallback: on_demand``), or None when it never falls back."""
        fallback = self.params.get("spot_fallback") == "on_demand"
        if not (self.runs_on_ec2 and self.spot and fallback):
            return None
        price = self.params.get("on_demand_cost_per_node_hour")
        return float(price) if isinstance(price, (int, float)) else None

    @property
    def iroh_cloud_engine(self) -> str | None:
        """iroh-tinker's own cloud engine (``aws``, ``gcp``, ``azure``) that this provider
        names, by name or by module reference; None for any other engine."""
        engine = self.engine_name
        if engine.startswith(_IROH_ENGINE_MODULES):
            engine = engine[len(_IROH_ENGINE_MODULES) :].split(":", 1)[0]
        return engine if engine in IROH_CLOUD_ENGINES else None

    @property
    def infra_ref(self) -> str:
        """``name/region``, or ``name`` when there is no region."""
        return f"{self.name}/{self.region}" if self.region else self.name

    @property
    def engine_name(self) -> str:
        """The iroh-tinker engine that provisions this provider."""
        return self.engine or self.name

    @property
    def engine_target(self) -> str:
        """The iroh-tinker ``resources.infra`` entry: ``engine/region`` or ``engine``."""
        engine = ENGINE_REFERENCES.get(self.engine_name, self.engine_name)
        return f"{engine}/{self.region}" if self.region else engine


PROVIDER_FIELDS = frozenset(field.name for field in Provider.__dataclass_fields__.values())


def provider_from_dict(data: Any, position: int | None = None) -> Provider:
    """Build one provider from a JSON object, naming the entry in any error."""
    where = "providers entry" if position is None else f"providers entry {position}"
    check_mapping(where, data)
    if "name" not in data:
        raise ElasticGridError(f"{where} is missing the field 'name'")
    return Provider.model_validate({**data, "region": data.get("region") or ""})


def launch_refusal(provider: Provider) -> str | None:
    """Why ``provider``'s nodes cannot be launched, in one sentence (None: they can)."""
    engine = provider.iroh_cloud_engine
    if engine is None:
        return None
    cloud = IROH_CLOUD_ENGINES[engine]
    if engine in PRODUCT_ENGINES:
        named = "; a provider's engine is its name unless set" if engine == provider.name else ""
        return (
            f"provider {provider.name!r} would launch on iroh-tinker's own {cloud} engine "
            f"(engine {provider.engine_name!r}{named}), which leaves instances running when a "
            f"launch fails and is never used: set its engine to {PRODUCT_ENGINES[engine]!r} "
            f"(docs/clouds.md), or to {SSH_ENGINE!r} for machines reached over SSH"
        )
    return (
        f"provider {provider.name!r} can be planned but not launched: {cloud} has no "
        f"elasticgrid engine yet, and iroh-tinker's own {engine!r} engine is never used (it "
        f"leaves instances running when a launch fails); run its machines as SSH hosts "
        f"(engine {SSH_ENGINE!r}), or plan without it"
    )


def check_grid_engines(providers: Iterable[Provider]) -> tuple[Provider, ...]:
    """Refuse a grid naming iroh-tinker's own engine for a cloud this package has an engine
    for (``aws``: use ``ec2``); other clouds' stay plannable, their launch refused."""
    result = tuple(providers)
    for provider in result:
        refusal = launch_refusal(provider)
        if refusal and provider.iroh_cloud_engine in PRODUCT_ENGINES:
            raise ElasticGridError(refusal)
    return result


def providers_from_dicts(data: Any) -> tuple[Provider, ...]:
    """Build a grid from a JSON list or ``{"providers": [...]}``; names must be unique, and
    iroh-tinker's own ``aws`` engine is refused (:func:`check_grid_engines`)."""
    if isinstance(data, dict) and "providers" in data:
        data = data["providers"]
    if not isinstance(data, list):
        raise ElasticGridError(
            f"providers must be a JSON list or an object with a 'providers' list, got {data!r}"
        )
    providers = tuple(provider_from_dict(entry, position) for position, entry in enumerate(data))
    return check_grid_engines(check_unique_names(providers))


def check_unique_names(providers: Iterable[Provider]) -> tuple[Provider, ...]:
    """Return the providers as a tuple, or raise naming the first repeated name."""
    seen: set[str] = set()
    result = tuple(providers)
    for provider in result:
        if provider.name in seen:
            raise ElasticGridError(f"provider name {provider.name!r} appears more than once")
        seen.add(provider.name)
    return result


DEFAULT_PROVIDERS: tuple[Provider, ...] = (
    Provider("local", max_nodes=8, cost_per_node_hour=0.0, spot=False),
    Provider("gcp", region="us-central1", max_nodes=64, cost_per_node_hour=3.5, accelerator="A100"),
    Provider(
        "aws",
        region="us-east-1",
        max_nodes=64,
        cost_per_node_hour=3.2,
        accelerator="p5.48xlarge",
        engine=PRODUCT_ENGINES["aws"],
    ),
    Provider(
        "azure", region="westeurope", max_nodes=32, cost_per_node_hour=3.9, accelerator="ND96asr"
    ),
)
"""The built-in grid used when neither the task nor the connection gives providers: ``aws``
launches on the ``ec2`` engine (which needs its params), ``gcp`` and ``azure`` plan only."""
