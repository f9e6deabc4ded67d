"""Benchmark: GridPlanner against scipy's HiGHS LP on 1,000 providers and 1,000,000 nodes.

Run with ``make bench-planner`` (``--quick``: 100 providers, 50,000 nodes, one
repeat). The grid is random but seeded, so every run plans the same instance. Each method is timed as the best of a
few repeats; the LP solves the same problem (for ``balance``: the same
problem with every provider capped at the planner's largest share) and the
costs must agree, so the table compares two routes to the same answer.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from pathlib import Path

from scipy.optimize import linprog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.report import Report, Table, arguments, best_time, check, fail
from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.providers import Provider

SEED = 20240601
PROVIDER_COUNT = 1_000
NODES = 1_000_000
MAX_SPOT_FRACTION = 0.6
REPEATS = 5
COST_TOLERANCE = 1e-6


def random_grid(seed: int = SEED, count: int = PROVIDER_COUNT) -> tuple[Provider, ...]:
    """A reproducible grid: 70% spot, 500-2,500 nodes each, $0.50-$5.00 per node-hour."""
    generator = random.Random(seed)
    return tuple(
        Provider(
            name=f"provider-{index:04d}",
            region=f"region-{generator.randrange(20)}",
            max_nodes=generator.randint(500, 2_500),
            cost_per_node_hour=round(generator.uniform(0.5, 5.0), 2),
            spot=generator.random() < 0.7,
        )
        for index in range(count)
    )


def linear_program_cost(
    providers: Sequence[Provider], nodes: int, spot_allowance: int, share_limit: int | None
) -> float:
    """The LP optimum of the placement problem, solved by HiGHS."""
    result = linprog(
        c=[provider.cost_per_node_hour for provider in providers],
        A_ub=[[1.0 if provider.spot else 0.0 for provider in providers]],
        b_ub=[spot_allowance],
        A_eq=[[1.0] * len(providers)],
        b_eq=[nodes],
        bounds=[
            (0, provider.max_nodes if share_limit is None else min(provider.max_nodes, share_limit))
            for provider in providers
        ],
        method="highs",
    )
    if result.status != 0:
        fail(f"the LP baseline did not solve the problem: {result.message}")
    return float(result.fun)


def benchmark(
    prefer: str, providers: tuple[Provider, ...], nodes: int = NODES, repeats: int = REPEATS
) -> tuple[str, float, float, float]:
    """Time the planner and the LP for one preference; check they agree on cost."""
    planner = GridPlanner(providers, max_spot_fraction=MAX_SPOT_FRACTION, prefer=prefer)
    planner_seconds, placement = best_time(lambda: planner.plan(nodes), repeats)
    planner_cost = sum(share.cost_per_hour for share in placement.assignments)
    share_limit = None
    if prefer == "balance":
        share_limit = max(share.nodes for share in placement.assignments)
    spot_allowance = planner.spot_allowance(nodes)
    lp_seconds, lp_cost = best_time(
        lambda: linear_program_cost(providers, nodes, spot_allowance, share_limit), repeats
    )
    check(
        abs(planner_cost - lp_cost) <= COST_TOLERANCE * max(1.0, lp_cost),
        f"prefer {prefer}: the planner costs ${planner_cost:.2f}/h but the LP ${lp_cost:.2f}/h",
    )
    check(placement.total_nodes == nodes, f"prefer {prefer}: the planner placed "
          f"{placement.total_nodes} nodes, not {nodes}")  # fmt: skip
    check(placement.spot_nodes <= spot_allowance, f"prefer {prefer}: the planner placed "
          f"{placement.spot_nodes} spot nodes, over the allowance of {spot_allowance}")  # fmt: skip
    return prefer, planner_seconds, lp_seconds, planner_cost


def main() -> None:
    """Build the grid, run both preferences, report the table."""
    args = arguments(__doc__).parse_args()
    count, nodes, repeats = (100, 50_000, 1) if args.quick else (PROVIDER_COUNT, NODES, REPEATS)
    providers = random_grid(count=count)
    capacity = sum(provider.max_nodes for provider in providers)
    check(capacity >= nodes, f"grid capacity {capacity} is below {nodes} nodes; change the seed")
    spot_count = sum(provider.spot for provider in providers)
    report = Report(
        "planner",
        "Placement planner against an LP solver",
        f"GridPlanner against scipy's HiGHS LP on the same placement problem: {count:,} "
        f"providers ({spot_count} spot), {nodes:,} nodes, max_spot_fraction "
        f"{MAX_SPOT_FRACTION}. Both must reach the same cost (within {COST_TOLERANCE:g}, "
        "relative), so the ratio compares two routes to one answer.",
        quick=args.quick,
        settings=f"seed {SEED}, best of {repeats}",
    )
    rows = []
    for prefer in ("cost", "balance"):
        name, planner_s, lp_s, cost = benchmark(prefer, providers, nodes, repeats)
        rows.append([name, f"{lp_s / planner_s:.1f}x", f"{planner_s * 1e3:.2f}",
                     f"{lp_s * 1e3:.2f}", f"{cost:,.2f}"])  # fmt: skip
    report.tables.append(
        Table(
            ["prefer", "LP time / planner time", "planner (ms)", "HiGHS LP (ms)", "cost ($/h)"],
            rows,
        )
    )
    report.publish(args.json)


if __name__ == "__main__":
    main()
