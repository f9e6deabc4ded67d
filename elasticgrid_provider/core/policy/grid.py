"""The shared grid as one decision sees it: the most nodes the job may have now, who holds
the rest, and a higher-priority job's request that it shrink.

The scale check computes a :class:`GridShare` from the grid ledger and hands it to
:func:`~elasticgrid_provider.core.policy.controller.decide` as a plain value; ``None`` decides
exactly as for a job alone on its grid. Pure: no Airflow, no I/O. The rules: docs/policy.md
("Rules, in order", "On a shared grid").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from elasticgrid_provider.core.fleet.ledger import ShrinkRequest
from elasticgrid_provider.core.fleet.sharing import JobClaim, shortfall_sentence
from elasticgrid_provider.core.validation import Count, JsonModel, Text, model

GRID_CAPACITY = "grid capacity"
"""How a hold by :attr:`HoldRule.CAPACITY` is named: the shared grid's capacity, never the
policy's ``max_nodes`` (the job may be well within its own bounds)."""
CAPACITY_REASON = "GridCapacity"
"""The reason of the ``ScalingLimited`` condition when the shared grid clamped a scale-up."""


@model
class GridShare(JsonModel):
    """What the shared grid leaves one job at one check (docs/policy.md)."""

    job: Text
    max_nodes: Count | None = None
    """The most nodes the job may have now (its own and its share of the free); None: no limit."""
    holders: dict[str, dict[str, Count]] = Field(default_factory=dict)
    """The nodes every other job uses, ``{job: {provider: nodes}}``: who holds what."""
    shrink: ShrinkRequest | None = None
    """A higher-priority job's request that this one shrink, or None."""

    def text(self) -> str:
        """The share in one line for the CLI: the room, who holds what, a shrink request."""
        room = "no limit" if self.max_nodes is None else f"room for {self.max_nodes} nodes"
        parts = [room, *holder_phrases(self.holders)]
        if self.shrink is not None:
            shrink = self.shrink
            parts.append(
                f"job {shrink.by_job!r} (priority {shrink.by_priority}) asked it to shrink "
                f"to {shrink.to_nodes}"
            )
        return "; ".join(parts)

    def shortfall(self, current: int, wanted: int) -> str:
        """``job 'a' wants 2 more nodes but 0 are free: 'b' holds 4 on local``."""
        claim = JobClaim(job=self.job, nodes=current, wanted=wanted, min_nodes=min(current, wanted))
        room = max(0, (self.max_nodes if self.max_nodes is not None else wanted) - current)
        return shortfall_sentence(claim, room, self.holders)


def grid_capacity_text(grid: Any, current_nodes: Any) -> str:
    """A hold by the shared grid's capacity as recorded: ``grid capacity (0 free; 'b' holds 4
    on local)`` from a decision's ``grid`` (its room and holders) and current size; just
    ``grid capacity`` when the record says no more."""
    grid = grid if isinstance(grid, Mapping) else {}
    room, current = grid.get("max_nodes"), current_nodes
    facts = []
    if isinstance(room, int) and isinstance(current, int) and not isinstance(room, bool):
        facts.append(f"{max(0, room - current)} free")
    holders = grid.get("holders")
    if isinstance(holders, Mapping):
        facts += holder_phrases(
            {
                str(job): {str(p): n for p, n in nodes.items() if isinstance(n, int)}
                for job, nodes in holders.items()
                if isinstance(nodes, Mapping)
            }
        )
    return f"{GRID_CAPACITY} ({'; '.join(facts)})" if facts else GRID_CAPACITY


def holder_phrases(holders: Mapping[str, Mapping[str, int]]) -> list[str]:
    """``'b' holds 4 on local`` per job that holds nodes, most nodes first, then by name."""
    held = [
        (job, {provider: nodes for provider, nodes in by_provider.items() if nodes > 0})
        for job, by_provider in holders.items()
    ]
    held.sort(key=lambda item: (-sum(item[1].values()), item[0]))
    return [
        f"{job!r} holds " + " and ".join(f"{n} on {p}" for p, n in sorted(by_provider.items()))
        for job, by_provider in held
        if by_provider
    ]
