"""The placement planner: which providers run how many of a job's nodes.

A pure function of (nodes, providers, policy): the same grid in any order gives the
same placement. The rules: docs/operators.md ("How placement works", "Sharing the grid
with other jobs").
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Annotated

from pydantic import PlainValidator

from elasticgrid_provider.core.errors import ElasticGridError, NotEnoughCapacityError
from elasticgrid_provider.core.monotone import smallest_satisfying
from elasticgrid_provider.core.placement import Assignment, Placement
from elasticgrid_provider.core.providers import Provider, check_unique_names
from elasticgrid_provider.core.validation import (
    Choice,
    JsonModel,
    check_integer,
    choice,
    finite,
    model,
)


class Prefer(Choice):
    """The placement preferences :class:`GridPlanner` understands (docs/operators.md)."""

    COST = "cost"
    BALANCE = "balance"


PREFER_CHOICES: tuple[str, ...] = tuple(prefer.value for prefer in Prefer)

_RELATIVE_TOLERANCE = 1e-12
"""Slack for ``fraction * nodes`` (0.7 * 10 is 7, not 6.999...): far above float error."""


@model
class GridPlanner(JsonModel):
    """Where a job's nodes run on a grid of providers, under a spot policy (docs/operators.md)."""

    WHERE = ""  # errors name the argument alone, as the operator and the CLI call it

    providers: Annotated[tuple[Provider, ...], PlainValidator(lambda p: _check_providers(p))]
    max_spot_fraction: Annotated[float, finite(0.0, 1.0)] = 1.0
    prefer: Annotated[Prefer, choice(Prefer)] = Prefer.COST

    @property
    def capacity(self) -> int:
        """The most nodes the grid can hold."""
        return sum(provider.max_nodes for provider in self.providers)

    @property
    def on_demand_capacity(self) -> int:
        """The most nodes the grid's on-demand (non-spot) providers can hold."""
        return sum(provider.max_nodes for provider in self.providers if not provider.spot)

    def spot_allowance(self, nodes: int) -> int:
        """The most spot nodes a job of ``nodes`` may use: the cap, or more if it must."""
        nodes = check_integer("nodes", nodes)
        spot_cap = _floor_product(self.max_spot_fraction, nodes)
        return max(spot_cap, nodes - self.on_demand_capacity)

    def plan(
        self,
        nodes: int,
        *,
        leave_out: Mapping[str, str] | None = None,
        held_by_others: Mapping[str, int] | None = None,
    ) -> Placement:
        """Place ``nodes`` nodes (at least 1) on the grid by the policy; raise if they do not fit.

        ``leave_out`` maps provider names to why they may not be used (a
        quarantine after lost capacity): they are planned around, and the
        placement's ``left_out`` names those of this grid with the reason.
        ``held_by_others`` maps provider names to the nodes other jobs hold
        there: only the rest is planned over, a provider with none free is
        skipped, and a shortfall raises :class:`NotEnoughCapacityError` saying
        how much the others hold.
        """
        nodes = check_integer("nodes", nodes, minimum=1)
        names = {provider.name for provider in self.providers}
        left_out = tuple(
            sorted((n, str(why)) for n, why in (leave_out or {}).items() if n in names)
        )
        held = _held_nodes(held_by_others or {}, names)
        skipped = {name for name, _ in left_out}
        kept = tuple(
            replace(provider, max_nodes=provider.max_nodes - held[provider.name])
            if held.get(provider.name) else provider
            for provider in self.providers
            if provider.name not in skipped and provider.max_nodes > held.get(provider.name, 0)
        )  # fmt: skip
        grid = replace(self, providers=kept) if left_out or held else self
        if nodes > grid.capacity:
            reasons = "; ".join(f"{name} {why}" for name, why in left_out)
            without = f" without the providers left out ({reasons})" if left_out else ""
            if held:
                held_total = sum(held.values())
                raise NotEnoughCapacityError(
                    f"nodes {nodes} exceeds the grid's free capacity of {grid.capacity} "
                    f"nodes{without}: other jobs hold {held_total} of its {self.capacity} nodes"
                )
            raise ElasticGridError(
                f"nodes {nodes} exceeds the grid's capacity of {grid.capacity} nodes{without}"
            )
        spot_allowance = grid.spot_allowance(nodes)
        ordered = sorted(grid.providers, key=lambda p: (p.cost_per_node_hour, p.name))  # fill order
        share_limit = None
        if self.prefer == Prefer.BALANCE:
            share_limit = _smallest_share_limit(ordered, nodes, spot_allowance)
        shares = _fill_cheapest_first(ordered, nodes, spot_allowance, share_limit)
        if held:  # the shares name the grid's own providers, not their free remainder
            own = {provider.name: provider for provider in self.providers}
            shares = tuple(Assignment(own[s.provider.name], s.nodes) for s in shares)
        return Placement(shares, left_out=left_out)


def _held_nodes(held_by_others: Mapping[str, int], names: set[str]) -> dict[str, int]:
    """The nodes other jobs hold on each of this grid's providers (others are ignored), each a
    whole number >= 0; providers where they hold none are left out."""
    held = {
        name: check_integer(f"held_by_others {name!r}", count)
        for name, count in held_by_others.items()
    }
    return {name: count for name, count in held.items() if count and name in names}


def _check_providers(providers: object) -> tuple[Provider, ...]:
    """The providers as a tuple of uniquely named :class:`Provider`, or raise."""
    if isinstance(providers, (str, bytes)) or not isinstance(providers, Iterable):
        raise ElasticGridError(f"providers must be a list of providers, got {providers!r}")
    result = tuple(providers)
    for position, provider in enumerate(result):
        if not isinstance(provider, Provider):
            raise ElasticGridError(
                f"providers entry {position} must be a Provider, got {provider!r}"
            )
    return check_unique_names(result)


def _floor_product(fraction: float, nodes: int) -> int:
    """``floor(fraction * nodes)``, immune to float error such as 0.7 * 10 = 6.999..."""
    product = fraction * nodes
    return math.floor(product + _RELATIVE_TOLERANCE * max(1.0, product))


def _fill_cheapest_first(
    ordered: Sequence[Provider], nodes: int, spot_allowance: int, share_limit: int | None
) -> tuple[Assignment, ...]:
    """Fill providers in order (each up to ``share_limit``), spot ones while the allowance lasts;
    the caller guarantees the nodes fit.

    Exact, not a heuristic: as ``max_nodes`` slots per provider, the sets within the
    per-provider caps and the spot allowance (groups that nest in the spot / on-demand
    split), truncated at ``nodes``, are the independent sets of a laminar matroid, so
    taking slots cheapest first, skipping those that break a limit, gives the cheapest
    basis (an allowance of at least ``nodes`` minus the on-demand capacity makes ``nodes``
    reachable). Taking whole runs per provider makes it O(P log P) with the sort.
    """
    remaining, spot_left = nodes, spot_allowance
    shares: list[Assignment] = []
    for provider in ordered:
        if remaining == 0:
            break
        room = provider.max_nodes if share_limit is None else min(provider.max_nodes, share_limit)
        taken = min(room, remaining, spot_left) if provider.spot else min(room, remaining)
        if taken <= 0:
            continue
        shares.append(Assignment(provider, taken))
        remaining -= taken
        if provider.spot:
            spot_left -= taken
    if remaining:  # pragma: no cover - excluded by the capacity and allowance checks
        raise AssertionError(f"planner left {remaining} of {nodes} nodes unplaced")
    return tuple(shares)


def _room_under_limit(capacities: Iterable[int]) -> Callable[[int], int]:
    """Total room of a group of providers when each may take at most ``limit`` nodes: sorted
    once with running sums, each query is a binary search (O(log P), not O(P))."""
    ordered = sorted(capacities)
    running_sums = [0, *itertools.accumulate(ordered)]

    def room(limit: int) -> int:
        below = bisect.bisect_right(ordered, limit)
        return running_sums[below] + limit * (len(ordered) - below)

    return room


def _smallest_share_limit(providers: Sequence[Provider], nodes: int, spot_allowance: int) -> int:
    """The smallest largest share that still fits the job (on-demand plus allowed spot room).

    Capping every provider at a limit keeps the matroid structure, and a placement's largest
    share is the limit exactly when it fits caps ``min(max_nodes, limit)``; so a binary search
    finds the limit and :func:`_fill_cheapest_first` the cheapest placement within it.
    """
    on_demand_room = _room_under_limit(p.max_nodes for p in providers if not p.spot)
    spot_room = _room_under_limit(p.max_nodes for p in providers if p.spot)

    def fits(limit: int) -> bool:
        return on_demand_room(limit) + min(spot_allowance, spot_room(limit)) >= nodes

    limit = smallest_satisfying(fits, 1, max(provider.max_nodes for provider in providers))
    if limit is None:  # the caller checked the grid's capacity first
        raise ElasticGridError(f"nodes {nodes} do not fit the grid")
    return limit
