"""``elasticgrid fleet``: the grid ledger, providers x jobs, free nodes and the queue.

The same view as the Fleet page and ``/elasticgrid/api/fleet``, from the same function
(:func:`~elasticgrid_provider.hooks.fleet_view.read_fleet`); it takes no lock and writes
nothing. The rules and the output: docs/fleet-ledger.md ("`elasticgrid fleet`").
"""

from __future__ import annotations

import argparse
from typing import Any

from elasticgrid_provider.cli.jobs_root import (
    add_jobs_root_arguments,
    connection_hook,
    existing_jobs_root,
)
from elasticgrid_provider.cli.parsing import load_grid
from elasticgrid_provider.cli.rendering import Result
from elasticgrid_provider.core.fleet.view import nodes_text, why_text
from elasticgrid_provider.core.formatting import aligned_table, clock_text, seconds_text

FLEET_HELP = (
    "show the grid ledger: nodes each job holds per provider, free nodes, the queue, "
    "the shrink requests"
)


def add_fleet_arguments(parser: argparse.ArgumentParser) -> None:
    """``fleet``'s options."""
    add_jobs_root_arguments(parser)
    parser.add_argument(
        "--providers",
        help="providers file for the capacities (default: the connection's grid, else those "
        "the ledger recorded)",
    )


def fleet_text(view: dict[str, Any]) -> str:
    """The fleet view as text: the providers x jobs table, then the queue."""
    jobs = [row["job"] for row in view["jobs"]]
    lines = [f"grid ledger: {view['ledger']}", f"capacities: {view['capacity_source']}"]
    if view["note"]:
        lines.append(f"note: {view['note']}")
    rows = [("provider", "capacity", "free", "pool", *jobs)]
    for provider in view["providers"]:
        capacity = provider["capacity"]
        cells = [nodes_text(provider["jobs"].get(job)) for job in jobs]
        rows.append(
            (
                provider["name"],
                "-" if capacity is None else str(capacity),
                str(provider["free"]),
                provider["pool"] or "-",
                *cells,
            )
        )
    lines += ["", aligned_table(rows, right=(1, 2))]
    if view["jobs"]:
        job_rows = [("job", "priority", "min_nodes", "launch")]
        job_rows += [
            (row["job"], str(row["priority"]), str(row["min_nodes"]), row["launch_id"])
            for row in view["jobs"]
        ]
        lines += ["", aligned_table(job_rows, right=(1, 2))]
    if not view["queue"]:
        lines += ["", "queue: empty"]
    else:
        queue_rows = [
            ("#", "job", "wants", "at least", "priority", "since", "timeout", "last look",
             "lease", "why")
        ]  # fmt: skip
        queue_rows += [
            (
                str(request["position"]),
                request["job"],
                str(request["nodes"]),
                str(request["min_nodes"]),
                str(request["priority"]),
                clock_text(request["since"]),
                seconds_text(request["timeout_s"]),
                clock_text(request["last_look"]),
                seconds_text(request["lease_s"]),
                why_text(request),
            )
            for request in view["queue"]
        ]
        lines += [
            "",
            "queue (served in this order):",
            aligned_table(queue_rows, right=(0, 2, 3, 4)),
        ]
    lines += ["", *shrinks_text(view["shrinks"]), "", *round_text(view.get("last_round"))]
    return "\n".join(lines)


def round_text(entry: dict[str, Any] | None) -> list[str]:
    """The newest allocation round as lines: when, who asked, the order with tiers and sizes."""
    if not entry:
        return ["allocation rounds: none recorded"]
    rows = [("#", "job", "tier", "nodes after", "hopeless")]
    rows += [
        (str(place), row["job"], row["tier"], str(row["nodes"]), "yes" if row["hopeless"] else "")
        for place, row in enumerate(entry["order"], start=1)
    ]
    head = f"last allocation round ({entry['by']}, {clock_text(entry['at'])}), in order:"
    return [head, aligned_table(rows, right=(0, 3))]


def shrinks_text(shrinks: list[dict[str, Any]]) -> list[str]:
    """The shrink requests as lines: who asked whom to shrink to how many nodes, since when."""
    if not shrinks:
        return ["shrink requests: none"]
    rows = [("job", "shrink to", "asked by", "its priority", "since")]
    rows += [
        (
            shrink["job"],
            str(shrink["to_nodes"]),
            shrink["by_job"],
            str(shrink["by_priority"]),
            clock_text(shrink["since"]),
        )
        for shrink in shrinks
    ]
    return ["shrink requests (the job's next check shrinks it):", aligned_table(rows, right=(1, 3))]


def run_fleet(args: argparse.Namespace) -> Result:
    """``fleet``: the grid ledger of the connection's jobs root (docs/fleet-ledger.md)."""
    grid = load_grid(args.providers) if args.providers else None
    hook = connection_hook(args)
    existing_jobs_root(args, hook)
    from elasticgrid_provider.hooks.fleet_view import read_fleet

    override = None
    if grid is not None:
        override = ({p.name: p.max_nodes for p in grid}, f"from {args.providers}")
    view = read_fleet(hook, override)
    return Result(fleet_text(view), view)
