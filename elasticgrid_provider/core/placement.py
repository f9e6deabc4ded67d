"""A placement: how many nodes run on which provider, and what that costs.

A placement is the planner's answer and the launch layer's input. It lists
per-provider shares in failover order (the order the planner filled them),
and derives everything else: total nodes, cost per hour, spot fraction, the
ordered infra references. It round-trips through plain JSON so it can travel
as an Airflow XCom; ``model_dump()`` keeps elasticgrid 0.1.0's keys
(``assignments`` as ``[{"provider", "nodes"}]``, ``total_nodes``,
``cost_per_hour``, ``spot_fraction``, ``infra_refs``) and adds each share's
provider details so the launch layer needs nothing else.
"""

from __future__ import annotations

from typing import Any

from pydantic import model_serializer, model_validator
from pydantic_core import ArgsKwargs

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.providers import (
    PROVIDER_FIELDS,
    Provider,
    launch_refusal,
    provider_from_dict,
)
from elasticgrid_provider.core.validation import JsonModel, Positive, check_mapping, model


@model
class Assignment(JsonModel):
    """One provider's share of a placement."""

    provider: Provider
    nodes: Positive

    @classmethod
    def _where(cls, data: Any) -> str:
        provider = data.get("provider") if isinstance(data, dict) else None
        return f"assignment {provider.name!r}" if isinstance(provider, Provider) else "assignment"

    @model_validator(mode="after")
    def _within_capacity(self) -> Assignment:
        if self.nodes > self.provider.max_nodes:
            raise ElasticGridError(
                f"assignment {self.provider.name!r} nodes {self.nodes} exceeds its "
                f"max_nodes {self.provider.max_nodes}"
            )
        return self

    @property
    def cost_per_hour(self) -> float:
        """What this share costs per hour."""
        return self.nodes * self.provider.cost_per_node_hour


@model
class Placement(JsonModel):
    """Per-provider shares in failover order; totals and costs are derived."""

    assignments: tuple[Assignment, ...] = ()
    left_out: tuple[tuple[str, str], ...] = ()
    """``(provider, why)`` for the providers the planner had to leave out (a quarantine)."""

    @model_validator(mode="before")
    @classmethod
    def _from_json(cls, data: Any) -> Any:
        """Rebuild the shares of :meth:`model_dump` output (for example an XCom)."""
        if not isinstance(data, dict):
            return data if isinstance(data, ArgsKwargs) else check_mapping("placement", data)
        entries = data.get("assignments")
        if not isinstance(entries, list):
            raise ElasticGridError(f"placement assignments must be a list, got {entries!r}")
        shares = []
        for position, entry in enumerate(entries):
            check_mapping(f"placement assignment {position}", entry)
            fields = {key: value for key, value in entry.items() if key in PROVIDER_FIELDS}
            fields.setdefault("name", entry.get("provider"))
            if "nodes" not in entry:
                raise ElasticGridError(
                    f"placement assignment {position} is missing the field 'nodes'"
                )
            shares.append(Assignment(provider_from_dict(fields, position), entry["nodes"]))
        left_out = data.get("left_out") or []
        if not isinstance(left_out, list) or not all(
            isinstance(item, dict)
            and isinstance(item.get("provider"), str)
            and isinstance(item.get("reason"), str)
            for item in left_out
        ):
            raise ElasticGridError(
                f"placement left_out must be a list of {{provider, reason}}, got {left_out!r}"
            )
        return {
            "assignments": tuple(shares),
            "left_out": tuple((item["provider"], item["reason"]) for item in left_out),
        }

    @property
    def total_nodes(self) -> int:
        """Nodes over all shares."""
        return sum(share.nodes for share in self.assignments)

    @property
    def cost_per_hour(self) -> float:
        """Dollars per hour for the whole placement, rounded to the cent."""
        return round(sum(share.cost_per_hour for share in self.assignments), 2)

    @property
    def fallback_cost_per_hour(self) -> float | None:
        """Dollars per hour if every share that may fall back from spot to on-demand does (at
        its provider's on-demand price), or None when none may."""
        prices = [share.provider.fallback_cost_per_node_hour for share in self.assignments]
        if all(price is None for price in prices):
            return None
        return round(
            sum(
                share.nodes * (share.provider.cost_per_node_hour if price is None else price)
                for share, price in zip(self.assignments, prices, strict=True)
            ),
            2,
        )

    @property
    def spot_nodes(self) -> int:
        """Nodes placed on spot capacity."""
        return sum(share.nodes for share in self.assignments if share.provider.spot)

    @property
    def spot_fraction(self) -> float:
        """Share of nodes on spot capacity (0 for an empty placement)."""
        total = self.total_nodes
        return self.spot_nodes / total if total else 0.0

    @property
    def infra_refs(self) -> list[str]:
        """The providers' infra references in failover order."""
        return [share.provider.infra_ref for share in self.assignments]

    @property
    def launch_refusals(self) -> tuple[str, ...]:
        """Why shares of it cannot be launched, one sentence per provider that only plans
        (iroh-tinker's own cloud engines, :func:`~elasticgrid_provider.core.providers.launch_refusal`)."""
        refusals = (launch_refusal(share.provider) for share in self.assignments)
        return tuple(refusal for refusal in refusals if refusal)

    def nodes_by_provider(self) -> dict[str, int]:
        """``{provider name: nodes}``: what two placements are compared by."""
        return {share.provider.name: share.nodes for share in self.assignments}

    @model_serializer(mode="plain")
    def _as_json(self) -> dict[str, Any]:
        """Plain JSON for XCom and ``--json``; the inverse of :meth:`model_validate`."""
        return {
            "assignments": [
                {
                    **share.provider.model_dump(),
                    "provider": share.provider.name,
                    "nodes": share.nodes,
                }
                for share in self.assignments
            ],
            "total_nodes": self.total_nodes,
            "cost_per_hour": self.cost_per_hour,
            "spot_fraction": round(self.spot_fraction, 6),
            "infra_refs": self.infra_refs,
            **(
                {"left_out": [{"provider": n, "reason": why} for n, why in self.left_out]}
                if self.left_out
                else {}
            ),
        }
