"""Benchmark: GridPlanner against scipy's HiGHS LP on 1,000 providers and 1,000,000 nodes.

Run with ``python benchmarks/bench_planner.py``. The grid is random but seeded,
so every run plans the same instance. Each method is timed as the best of a
few repeats; the LP solves the same problem (for ``balance``: the same
problem with every provider capped at the planner's largest share) and the
costs must agree, so the table compares two routes to the same answer.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from scipy.optimize import linprog

from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.providers import Provider

SEED = 20240601
PROVIDER_COUNT = 1_000
NODES = 1_000_000
MAX_SPOT_FRACTION = 0.6
REPEATS = 5
COST_TOLERANCE = 1e-6

Result = TypeVar("Result")


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


def best_time(action: Callable[[], Result], repeats: int = REPEATS) -> tuple[float, Result]:
    """The fastest of ``repeats`` runs, in seconds, and the last result."""
    best = float("inf")
    result: Result | None = None
    for _ in range(repeats):
        started = time.perf_counter()
        result = action()
        best = min(best, time.perf_counter() - started)
    assert result is not None
    return best, result


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
        raise RuntimeError(f"linprog failed: {result.message}")
    return float(result.fun)


def benchmark(prefer: str, providers: tuple[Provider, ...]) -> tuple[str, float, float, float]:
    """Time the planner and the LP for one preference; check they agree on cost."""
    planner = GridPlanner(providers, max_spot_fraction=MAX_SPOT_FRACTION, prefer=prefer)
    planner_seconds, placement = best_time(lambda: planner.plan(NODES))
    planner_cost = sum(share.cost_per_hour for share in placement.assignments)
    share_limit = None
    if prefer == "balance":
        share_limit = max(share.nodes for share in placement.assignments)
    spot_allowance = planner.spot_allowance(NODES)
    lp_seconds, lp_cost = best_time(
        lambda: linear_program_cost(providers, NODES, spot_allowance, share_limit)
    )
    if abs(planner_cost - lp_cost) > COST_TOLERANCE * max(1.0, lp_cost):
        raise AssertionError(f"{prefer}: planner ${planner_cost:.2f}/h but LP ${lp_cost:.2f}/h")
    assert placement.total_nodes == NODES
    assert placement.spot_nodes <= spot_allowance
    return prefer, planner_seconds, lp_seconds, planner_cost


def main() -> None:
    """Build the grid, run both preferences, print the table."""
    providers = random_grid()
    capacity = sum(provider.max_nodes for provider in providers)
    if capacity < NODES:
        raise SystemExit(f"grid capacity {capacity} is below {NODES} nodes; change the seed")
    spot_count = sum(provider.spot for provider in providers)
    print(
        f"grid: {len(providers):,} providers ({spot_count} spot), capacity {capacity:,} nodes; "
        f"job: {NODES:,} nodes, max_spot_fraction {MAX_SPOT_FRACTION}; best of {REPEATS}"
    )
    print()
    print("| prefer  | planner (ms) | HiGHS LP (ms) | LP / planner | cost ($/h)     |")
    print("|---------|-------------:|--------------:|-------------:|---------------:|")
    for prefer in ("cost", "balance"):
        name, planner_seconds, lp_seconds, cost = benchmark(prefer, providers)
        print(
            f"| {name:<7} | {planner_seconds * 1e3:12.2f} | {lp_seconds * 1e3:13.2f} "
            f"| {lp_seconds / planner_seconds:11.1f}x | {cost:14,.2f} |"
        )
    print()
    print("costs agree with the LP optimum to within 1e-6 (relative)")


if __name__ == "__main__":
    main()
