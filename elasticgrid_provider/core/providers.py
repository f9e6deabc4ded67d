"""Providers: the places a job's nodes can run.

A provider is one pool of nodes at one price: a cloud region, an on-prem
pool, this machine. Its ``infra_ref`` (``name/region``, or ``name`` without a
region) is how placements and logs name it; its ``engine`` is the iroh-tinker
engine that provisions it (defaults to its name), so several providers can
map to one engine, which is how tests run a multi-provider placement here.

Rules: names are unique and non-empty; ``max_nodes`` is a whole number
>= 0; ``cost_per_node_hour`` is a finite number >= 0; ``spot`` is a bool.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.validation import (
    check_integer,
    check_mapping,
    check_number,
    check_text,
    reject_unknown_keys,
)

PROVIDER_FIELDS = frozenset(
    {"name", "region", "max_nodes", "cost_per_node_hour", "accelerator", "spot", "engine"}
)


@dataclass(frozen=True)
class Provider:
    """One pool of nodes with a capacity, a price per node-hour and a spot flag."""

    name: str
    max_nodes: int
    cost_per_node_hour: float
    region: str = ""
    accelerator: str | None = None
    spot: bool = True
    engine: str | None = None

    def __post_init__(self) -> None:
        label = f"provider {self.name!r}" if isinstance(self.name, str) else "provider"
        check_text("provider name", self.name)
        object.__setattr__(self, "max_nodes", check_integer(f"{label} max_nodes", self.max_nodes))
        object.__setattr__(
            self,
            "cost_per_node_hour",
            check_number(f"{label} cost_per_node_hour", self.cost_per_node_hour),
        )
        check_text(f"{label} region", self.region, allow_empty=True)
        if self.accelerator is not None:
            check_text(f"{label} accelerator", self.accelerator, allow_empty=True)
        if not isinstance(self.spot, bool):
            raise ElasticGridError(f"{label} spot must be true or false, got {self.spot!r}")
        if self.engine is None:
            object.__setattr__(self, "engine", self.name)
        check_text(f"{label} engine", self.engine)

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
        return f"{self.engine_name}/{self.region}" if self.region else self.engine_name

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON, the inverse of :func:`provider_from_dict`."""
        return {
            "name": self.name,
            "region": self.region,
            "max_nodes": self.max_nodes,
            "cost_per_node_hour": self.cost_per_node_hour,
            "accelerator": self.accelerator,
            "spot": self.spot,
            "engine": self.engine_name,
        }


def provider_from_dict(data: Any, position: int | None = None) -> Provider:
    """Build one provider from a JSON object, naming the entry in any error."""
    where = "providers entry" if position is None else f"providers entry {position}"
    check_mapping(where, data)
    if "name" not in data:
        raise ElasticGridError(f"{where} is missing the field 'name'")
    label = f"provider {data['name']!r}"
    reject_unknown_keys(label, data, PROVIDER_FIELDS)
    for required in ("max_nodes", "cost_per_node_hour"):
        if required not in data:
            raise ElasticGridError(f"{label} is missing the field {required!r}")
    return Provider(
        name=data["name"],
        region=data.get("region") or "",
        max_nodes=data["max_nodes"],
        cost_per_node_hour=data["cost_per_node_hour"],
        accelerator=data.get("accelerator"),
        spot=data.get("spot", True),
        engine=data.get("engine"),
    )


def providers_from_dicts(data: Any) -> tuple[Provider, ...]:
    """Build a grid from a JSON list or ``{"providers": [...]}``; names must be unique."""
    if isinstance(data, dict) and "providers" in data:
        data = data["providers"]
    if not isinstance(data, list):
        raise ElasticGridError(
            f"providers must be a JSON list or an object with a 'providers' list, got {data!r}"
        )
    providers = tuple(provider_from_dict(entry, position) for position, entry in enumerate(data))
    return check_unique_names(providers)


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
        "aws", region="us-east-1", max_nodes=64, cost_per_node_hour=3.2, accelerator="p5.48xlarge"
    ),
    Provider(
        "azure", region="westeurope", max_nodes=32, cost_per_node_hour=3.9, accelerator="ND96asr"
    ),
)
"""The built-in grid used when no providers are configured (SPEC 4.5)."""
