"""The grid commands, ``providers``, ``plan`` and ``spec``, and ``schema``: read inputs, compute, build a Result.

Rules:

* A command takes the parsed arguments and returns a
  :class:`~elasticgrid_provider.cli.rendering.Result` holding both its text
  and its JSON data; it never prints (``main`` does) and never formats text
  itself (:mod:`~elasticgrid_provider.cli.rendering` does).
* The work is the pure core's (:class:`GridPlanner`, :func:`build_launch_parts`);
  bad input surfaces as the core's one-sentence :class:`ElasticGridError`.
* JSON keeps 0.1.0's keys (listed in :mod:`elasticgrid_provider.cli`).

``simulate`` lives in :mod:`elasticgrid_provider.cli.simulate`.
"""

from __future__ import annotations

import argparse
import json

from elasticgrid_provider.cli.inputs import load_grid
from elasticgrid_provider.cli.parsing import DEFAULT_RENDEZVOUS
from elasticgrid_provider.cli.rendering import Result, plan_summary, providers_text, spec_text
from elasticgrid_provider.core.formatting import placement_table
from elasticgrid_provider.core.launch_spec import LaunchOptions, build_launch_parts
from elasticgrid_provider.core.placement import Placement
from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.schemas import json_schema


def run_providers(args: argparse.Namespace) -> Result:
    """``providers``: the grid (built-in or from ``--providers``)."""
    grid = load_grid(args.providers)
    source = "built-in grid" if args.providers is None else args.providers
    return Result(
        providers_text(grid, source), {"providers": [provider.to_dict() for provider in grid]}
    )


def _plan(args: argparse.Namespace) -> tuple[GridPlanner, Placement]:
    grid = load_grid(args.providers)
    planner = GridPlanner(grid, max_spot_fraction=args.max_spot_fraction, prefer=args.prefer)
    return planner, planner.plan(args.nodes)


def run_plan(args: argparse.Namespace) -> Result:
    """``plan``: place ``--nodes`` on the grid and cost it."""
    planner, placement = _plan(args)
    text = placement_table(placement) + "\n\n" + plan_summary(planner, placement)
    return Result(text, placement.to_dict())


def run_spec(args: argparse.Namespace) -> Result:
    """``spec``: plan, then render the iroh-tinker launch parts (one per provider)."""
    _, placement = _plan(args)
    rendezvous = args.rendezvous
    if rendezvous is None:
        rendezvous = DEFAULT_RENDEZVOUS.format(name=args.name)
    options = LaunchOptions(run=args.run, procs_per_node=args.procs_per_node, rendezvous=rendezvous)
    parts = build_launch_parts(placement, args.name, options)
    text = spec_text(
        args.name,
        placement,
        parts,
        options.procs_per_node,
        rendezvous,
        default_rendezvous=args.rendezvous is None,
    )
    data = {
        "job_name": args.name,
        "placement": placement.to_dict(),
        "world_size": parts[0].world_size,
        "parts": [
            {
                "part_name": part.part_name,
                "provider": part.provider.name,
                "nodes": part.nodes,
                "rank_offset": part.rank_offset,
                "world_size": part.world_size,
                "infra": part.engine_target,
                "spec": part.spec_dict,
            }
            for part in parts
        ],
    }
    return Result(text, data)


def run_schema(args: argparse.Namespace) -> Result:
    """``schema state|decision``: the stored document's JSON Schema (always JSON)."""
    schema = json_schema(args.kind)
    return Result(json.dumps(schema, indent=2), schema)
