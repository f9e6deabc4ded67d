"""The grid ledger as the fleet views show it: the CLI's ``elasticgrid fleet`` and the Fleet page.

Which providers a view lists and their capacities (:func:`fleet_capacities`), and the view
itself as plain JSON, so both views print the same thing. The rules and the JSON:
docs/fleet-ledger.md ("`elasticgrid fleet`"), docs/fleet.md ("The audit").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from elasticgrid_provider.core.fleet.ledger import (
    AllocationRound,
    GridLedger,
    HoldingPhase,
    free_nodes,
    queue_order,
)


def _nodes_by_phase(ledger: GridLedger, job: str, phase: HoldingPhase) -> dict[str, int]:
    nodes: dict[str, int] = {}
    for holding in ledger.holdings_of(job):
        if holding.phase == phase:
            nodes[holding.provider] = nodes.get(holding.provider, 0) + holding.nodes
    return nodes


def nodes_text(cell: Mapping[str, int] | None) -> str:
    """One job's nodes on one provider in a fleet view: ``2 held``, ``3 reserved``, both,
    or ``-``."""
    words = [f"{(cell or {})[phase]} {phase}" for phase in HoldingPhase if (cell or {}).get(phase)]
    return ", ".join(words) or "-"


def fleet_capacities(
    ledger: GridLedger,
    connection: tuple[Mapping[str, int], str] | None = None,
    override: tuple[Mapping[str, int], str] | None = None,
) -> tuple[dict[str, int], str]:
    """The capacities a fleet view shows and where they come from, in words: the pools jobs use
    plus the connection's grid when it sets one (never the built-in grid on its own); the
    connection's capacity where it names a provider, else the ledger's; ``override`` beats both.

    ``connection``: the connection's grid and its name, when the connection sets one;
    ``override``: a providers file and its name (the CLI's ``--providers``).
    """
    capacities = dict(ledger.capacities or {})
    sources = ["recorded in the ledger"] if capacities else []
    for layer in (connection, override):
        if layer is not None:
            grid, named = layer
            capacities.update(grid)
            sources.insert(0, named)
    if not sources:
        return capacities, "none known (no reservation recorded any, and no grid is set)"
    return capacities, ", else ".join(sources)


def fleet_view(ledger: GridLedger, capacities: Mapping[str, int]) -> dict[str, Any]:
    """The ledger as the fleet views show it, plain JSON: ``providers`` (name, capacity,
    free, the pool the name stands for, and per job the nodes held and reserved), ``jobs`` (priority, min_nodes, launch,
    held and reserved per provider) and ``queue`` in serving order (with ``position``)."""
    free = free_nodes(ledger, capacities)
    jobs: list[dict[str, Any]] = []
    for job in sorted({holding.job for holding in ledger.holdings}):
        mine = ledger.holdings_of(job)
        newest = max(mine, key=lambda holding: holding.launch_id)
        jobs.append(
            {
                "job": job,
                "priority": newest.priority,
                "min_nodes": newest.min_nodes,
                "launch_id": newest.launch_id,
                "held": _nodes_by_phase(ledger, job, HoldingPhase.HELD),
                "reserved": _nodes_by_phase(ledger, job, HoldingPhase.RESERVED),
            }
        )
    names = sorted(set(capacities) | {holding.provider for holding in ledger.holdings})
    providers = [
        {
            "name": name,
            "capacity": capacities.get(name),
            "free": free.get(name, 0),
            "pool": pool.text if (pool := (ledger.pools or {}).get(name)) else None,
            "jobs": {
                row["job"]: {
                    "held": row["held"].get(name, 0),
                    "reserved": row["reserved"].get(name, 0),
                }
                for row in jobs
                if name in row["held"] or name in row["reserved"]
            },
        }
        for name in names
    ]
    last = ledger.rounds[-1] if ledger.rounds else None
    queue = [
        {
            **request.model_dump(),
            "position": place,
            "last_look": request.last_look,
            **_why(ledger, request.job),
        }
        for place, request in enumerate(queue_order(ledger), start=1)
    ]
    shrinks = [shrink.model_dump() for shrink in ledger.shrinks]
    return {
        "providers": providers,
        "jobs": jobs,
        "queue": queue,
        "shrinks": shrinks,
        "last_round": None if last is None else _round_view(last),
        "updated_at": ledger.updated_at,
    }


def why_text(request: Mapping[str, Any]) -> str:
    """Why a queued job queues, as the newest allocation round said (``hopeless`` first)."""
    words = ["hopeless"] if request.get("hopeless") else []
    return "; ".join([*words, request.get("reason") or "-"])


def _why(ledger: GridLedger, job: str) -> dict[str, Any]:
    """Why ``job`` queues and whether it is hopeless, from the newest audited round that
    names it (empty reason when none does)."""
    for entry in reversed(ledger.rounds):
        if job in entry.order:
            return {"reason": (entry.queued or {}).get(job, ""), "hopeless": job in entry.hopeless}
    return {"reason": "", "hopeless": False}


def _round_view(entry: AllocationRound) -> dict[str, Any]:
    """The newest allocation round as the views show it: when, who asked, the order (with each
    job's tier and size after it), why each queued job queues, the hopeless jobs."""
    return {
        "at": entry.at,
        "by": entry.by,
        "order": [
            {
                "job": job,
                "tier": (entry.tiers or {}).get(job, ""),
                "nodes": (entry.result or {}).get(job, 0),
                "hopeless": job in entry.hopeless,
            }
            for job in entry.order
        ],
        "queued": dict(entry.queued or {}),
    }
