"""GridPlanner: the built-in grid filled cheapest first, optimality against an LP and brute force, errors."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from elasticgrid_provider.core.errors import ElasticGridError, NotEnoughCapacityError
from elasticgrid_provider.core.placement import Placement
from elasticgrid_provider.core.planner import PREFER_CHOICES, GridPlanner
from elasticgrid_provider.core.providers import DEFAULT_PROVIDERS, Provider

COST_TOLERANCE = 1e-6


# ---------------------------------------------------------------------------
# Random grids: small, with many cost ties, a policy given as an exact ratio.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A random grid, a spot fraction written as an exact ratio, and a job size."""

    providers: tuple[Provider, ...]
    fraction_numerator: int
    fraction_denominator: int
    nodes: int

    @property
    def fraction(self) -> float:
        return self.fraction_numerator / self.fraction_denominator

    @property
    def spot_cap(self) -> int:
        """S = floor(fraction * N), in exact integer arithmetic."""
        return self.fraction_numerator * self.nodes // self.fraction_denominator

    @property
    def on_demand_capacity(self) -> int:
        """D: what the non-spot providers hold."""
        return sum(p.max_nodes for p in self.providers if not p.spot)

    @property
    def spot_allowance(self) -> int:
        """K = max(S, N - D): the cap, or the fewest spot nodes that fit the job."""
        return max(self.spot_cap, self.nodes - self.on_demand_capacity)


@st.composite
def grids(draw: st.DrawFn, *, max_providers: int, max_capacity: int) -> tuple[Provider, ...]:
    count = draw(st.integers(min_value=1, max_value=max_providers))
    return tuple(
        Provider(
            name=f"p{index}",
            max_nodes=draw(st.integers(min_value=0, max_value=max_capacity)),
            cost_per_node_hour=draw(st.integers(min_value=0, max_value=40)) / 10,
            spot=draw(st.booleans()),
        )
        for index in range(count)
    )


@st.composite
def cases(draw: st.DrawFn, *, max_providers: int = 8, max_capacity: int = 30) -> Case:
    providers = draw(grids(max_providers=max_providers, max_capacity=max_capacity))
    denominator = draw(st.integers(min_value=1, max_value=100))
    numerator = draw(st.integers(min_value=0, max_value=denominator))
    capacity = sum(provider.max_nodes for provider in providers)
    assume(capacity >= 1)  # a job has at least one node
    nodes = draw(st.integers(min_value=1, max_value=capacity))
    return Case(providers, numerator, denominator, nodes)


def plan(case: Case, prefer: str = "cost") -> Placement:
    planner = GridPlanner(case.providers, max_spot_fraction=case.fraction, prefer=prefer)
    return planner.plan(case.nodes)


def exact_cost(placement: Placement) -> float:
    """Unrounded cost per hour (Placement.cost_per_hour rounds to the cent)."""
    return sum(share.cost_per_hour for share in placement.assignments)


def largest_share(placement: Placement) -> int:
    return max((share.nodes for share in placement.assignments), default=0)


def assert_respects_policy(placement: Placement, case: Case) -> None:
    capacity_by_name = {provider.name: provider.max_nodes for provider in case.providers}
    assert placement.total_nodes == case.nodes
    assert placement.spot_nodes <= case.spot_allowance
    for share in placement.assignments:
        assert 0 < share.nodes <= capacity_by_name[share.provider.name]
    fill_order = [(s.provider.cost_per_node_hour, s.provider.name) for s in placement.assignments]
    assert fill_order == sorted(fill_order)


def linear_program_cost(case: Case) -> float:
    """The LP optimum: min c.x, sum x = N, sum spot x <= K, 0 <= x <= cap (integral: TU)."""
    if case.nodes == 0:
        return 0.0
    result = linprog(
        c=[provider.cost_per_node_hour for provider in case.providers],
        A_ub=[[1.0 if provider.spot else 0.0 for provider in case.providers]],
        b_ub=[case.spot_allowance],
        A_eq=[[1.0] * len(case.providers)],
        b_eq=[case.nodes],
        bounds=[(0, provider.max_nodes) for provider in case.providers],
        method="highs",
    )
    assert result.status == 0, result.message
    return float(result.fun)


def all_placements(case: Case) -> Iterator[tuple[int, ...]]:
    """Every per-provider count vector with the right total, within caps and allowance."""

    def extend(prefix: tuple[int, ...], remaining: int) -> Iterator[tuple[int, ...]]:
        position = len(prefix)
        if position == len(case.providers):
            if remaining == 0:
                yield prefix
            return
        room_after = sum(p.max_nodes for p in case.providers[position + 1 :])
        low = max(0, remaining - room_after)
        high = min(case.providers[position].max_nodes, remaining)
        for count in range(low, high + 1):
            yield from extend((*prefix, count), remaining - count)

    for counts in extend((), case.nodes):
        spot = sum(c for c, p in zip(counts, case.providers, strict=True) if p.spot)
        if spot <= case.spot_allowance:
            yield counts


def brute_force_balance(case: Case) -> tuple[int, float]:
    """The best (largest share, cost) over all valid placements."""

    def key(counts: Sequence[int]) -> tuple[int, float]:
        cost = sum(c * p.cost_per_node_hour for c, p in zip(counts, case.providers, strict=True))
        return max(counts, default=0), cost

    return min(key(counts) for counts in all_placements(case))


# ---------------------------------------------------------------------------
# The built-in grid: the free local provider first, then the cheapest cloud.
# ---------------------------------------------------------------------------


def test_eight_nodes_go_to_the_free_local_provider() -> None:
    # local is on-demand, free and holds 8: nothing beats $0/h.
    placement = GridPlanner(DEFAULT_PROVIDERS).plan(8)
    assert placement.nodes_by_provider() == {"local": 8}
    assert placement.cost_per_hour == 0.0
    assert placement.spot_fraction == 0.0
    assert placement.infra_refs == ["local"]


def test_hundred_nodes_cost_the_optimal_302_80() -> None:
    # Cheapest first: local 8 at $0, aws 64 at $3.2, the remaining 28 on gcp at $3.5.
    # 64 * 3.2 + 28 * 3.5 = 204.8 + 98.0 = 302.8 (skipping the free local pool: $330.80).
    placement = GridPlanner(DEFAULT_PROVIDERS).plan(100)
    assert [(s.provider.name, s.nodes) for s in placement.assignments] == [
        ("local", 8),
        ("aws", 64),
        ("gcp", 28),
    ]
    assert placement.cost_per_hour == pytest.approx(302.80)
    assert placement.infra_refs == ["local", "aws/us-east-1", "gcp/us-central1"]
    assert placement.spot_fraction == pytest.approx(0.92)


def test_full_grid_uses_every_provider() -> None:
    placement = GridPlanner(DEFAULT_PROVIDERS).plan(168)
    assert placement.nodes_by_provider() == {"local": 8, "aws": 64, "gcp": 64, "azure": 32}
    assert placement.cost_per_hour == pytest.approx(64 * 3.2 + 64 * 3.5 + 32 * 3.9)


def test_balance_spreads_equal_providers_evenly() -> None:
    providers = tuple(Provider(name, max_nodes=10, cost_per_node_hour=1.0) for name in "abc")
    cost = GridPlanner(providers).plan(9)
    balance = GridPlanner(providers, prefer="balance").plan(9)
    assert cost.nodes_by_provider() == {"a": 9}
    assert balance.nodes_by_provider() == {"a": 3, "b": 3, "c": 3}
    assert balance.cost_per_hour == cost.cost_per_hour == 9.0


def test_balance_on_the_default_grid() -> None:
    # local holds only 8; the other 92 split as evenly as possible: 31, 31, 30,
    # the cheaper providers taking the larger shares.
    placement = GridPlanner(DEFAULT_PROVIDERS, prefer="balance").plan(100)
    assert [(s.provider.name, s.nodes) for s in placement.assignments] == [
        ("local", 8),
        ("aws", 31),
        ("gcp", 31),
        ("azure", 30),
    ]
    assert placement.cost_per_hour == pytest.approx(31 * 3.2 + 31 * 3.5 + 30 * 3.9)


# ---------------------------------------------------------------------------
# The spot policy.
# ---------------------------------------------------------------------------


def cheap_spot_grid() -> tuple[Provider, ...]:
    return (
        Provider("spot", max_nodes=1000, cost_per_node_hour=1.0, spot=True),
        Provider("steady", max_nodes=1000, cost_per_node_hour=5.0, spot=False),
    )


@pytest.mark.parametrize(
    ("fraction", "nodes", "expected_spot"),
    [
        (0.29, 100, 29),  # 0.29 * 100 == 28.999999999999996 in floats
        (0.57, 100, 57),  # 56.99999999999999
        (0.7, 10, 7),
        (0.5, 7, 3),  # floor, not round
        (0.0, 50, 0),
        (1.0, 50, 50),
    ],
)
def test_spot_cap_is_the_floor_of_the_fraction(
    fraction: float, nodes: int, expected_spot: int
) -> None:
    placement = GridPlanner(cheap_spot_grid(), max_spot_fraction=fraction).plan(nodes)
    assert placement.spot_nodes == expected_spot
    assert placement.total_nodes == nodes


def test_spot_cap_is_exact_for_every_percentage() -> None:
    # Exhaustive over whole percentages: many products such as 0.29 * 100 land just
    # below the integer in floats; the cap must still be the exact floor.
    grid = cheap_spot_grid()
    wrong = [
        (percent, nodes)
        for percent in range(101)
        for nodes in range(1, 201)
        if GridPlanner(grid, max_spot_fraction=percent / 100).plan(nodes).spot_nodes
        != percent * nodes // 100
    ]
    assert wrong == []


def test_spot_cap_holds_for_huge_jobs() -> None:
    providers = (
        Provider("spot", max_nodes=10**9, cost_per_node_hour=1.0, spot=True),
        Provider("steady", max_nodes=10**9, cost_per_node_hour=5.0, spot=False),
    )
    placement = GridPlanner(providers, max_spot_fraction=0.29).plan(10**9)
    assert placement.nodes_by_provider() == {"spot": 290_000_000, "steady": 710_000_000}


def test_spot_cap_is_exceeded_only_as_far_as_needed() -> None:
    # fraction 0 allows no spot, but on-demand holds 8 of 20: 12 go to spot anyway.
    placement = GridPlanner(DEFAULT_PROVIDERS, max_spot_fraction=0.0).plan(20)
    assert placement.nodes_by_provider() == {"local": 8, "aws": 12}


def test_spot_cap_pushes_nodes_to_dearer_on_demand() -> None:
    providers = (
        Provider("spot", max_nodes=100, cost_per_node_hour=1.0, spot=True),
        Provider("dear", max_nodes=5, cost_per_node_hour=9.0, spot=False),
        Provider("cheap", max_nodes=5, cost_per_node_hour=3.0, spot=False),
    )
    placement = GridPlanner(providers, max_spot_fraction=0.5).plan(16)
    # S = 8, D = 10: 8 spot, then the cheaper on-demand first.
    assert [(s.provider.name, s.nodes) for s in placement.assignments] == [
        ("spot", 8),
        ("cheap", 5),
        ("dear", 3),
    ]


@settings(max_examples=200, deadline=None)
@given(cases())
def test_cost_matches_the_linear_program_optimum(case: Case) -> None:
    placement = plan(case)
    assert_respects_policy(placement, case)
    assert exact_cost(placement) == pytest.approx(linear_program_cost(case), abs=COST_TOLERANCE)


@settings(max_examples=200, deadline=None)
@given(cases(), st.sampled_from(PREFER_CHOICES))
def test_spot_nodes_stay_within_the_allowance(case: Case, prefer: str) -> None:
    placement = plan(case, prefer)
    assert placement.spot_nodes <= max(case.spot_cap, case.nodes - case.on_demand_capacity)
    if case.nodes - case.on_demand_capacity > case.spot_cap:
        assert placement.spot_nodes == case.nodes - case.on_demand_capacity


# ---------------------------------------------------------------------------
# Balance against brute force.
# ---------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    cases(max_providers=4, max_capacity=8).filter(lambda case: case.nodes <= 12),
)
def test_balance_matches_brute_force(case: Case) -> None:
    placement = plan(case, "balance")
    assert_respects_policy(placement, case)
    best_largest_share, best_cost = brute_force_balance(case)
    assert largest_share(placement) == best_largest_share
    assert exact_cost(placement) == pytest.approx(best_cost, abs=COST_TOLERANCE)


@settings(max_examples=100, deadline=None)
@given(cases(max_providers=4, max_capacity=8).filter(lambda case: case.nodes <= 12))
def test_cost_matches_brute_force(case: Case) -> None:
    placement = plan(case)
    best_cost = min(
        sum(c * p.cost_per_node_hour for c, p in zip(counts, case.providers, strict=True))
        for counts in all_placements(case)
    )
    assert exact_cost(placement) == pytest.approx(best_cost, abs=COST_TOLERANCE)


# ---------------------------------------------------------------------------
# Determinism.
# ---------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(st.data(), cases(), st.sampled_from(PREFER_CHOICES))
def test_placement_ignores_provider_order(data: st.DataObject, case: Case, prefer: str) -> None:
    shuffled = tuple(data.draw(st.permutations(case.providers)))
    first = plan(case, prefer)
    again = plan(case, prefer)
    reordered = GridPlanner(shuffled, max_spot_fraction=case.fraction, prefer=prefer).plan(
        case.nodes
    )
    assert first == again == reordered


def test_equal_costs_fill_by_name() -> None:
    providers = tuple(Provider(name, max_nodes=4, cost_per_node_hour=2.0) for name in "bca")
    placement = GridPlanner(providers).plan(6)
    assert [(s.provider.name, s.nodes) for s in placement.assignments] == [("a", 4), ("b", 2)]


# ---------------------------------------------------------------------------
# Inputs and errors.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("nodes", [0, -1, 0.0])
def test_fewer_than_one_node_is_rejected_in_one_sentence(nodes: int) -> None:
    for grid in (DEFAULT_PROVIDERS, ()):
        with pytest.raises(ElasticGridError) as caught:
            GridPlanner(grid).plan(nodes)
        assert str(caught.value) == f"nodes must be at least 1, got {nodes!r}"


def test_whole_float_nodes_are_accepted() -> None:
    placement = GridPlanner(DEFAULT_PROVIDERS).plan(8.0)  # type: ignore[arg-type]
    assert placement.nodes_by_provider() == {"local": 8}


def test_more_nodes_than_capacity_names_both_numbers() -> None:
    with pytest.raises(ElasticGridError, match=r"nodes 500 exceeds .*capacity of 168 nodes"):
        GridPlanner(DEFAULT_PROVIDERS).plan(500)


def test_empty_grid_has_no_capacity() -> None:
    with pytest.raises(ElasticGridError, match=r"nodes 1 exceeds .*capacity of 0 nodes"):
        GridPlanner(()).plan(1)


@pytest.mark.parametrize("nodes", [-1, math.nan, math.inf, 2.5, True, "3", None])
def test_bad_node_counts_are_refused(nodes: object) -> None:
    with pytest.raises(ElasticGridError, match="nodes"):
        GridPlanner(DEFAULT_PROVIDERS).plan(nodes)  # type: ignore[arg-type]


@pytest.mark.parametrize("fraction", [-0.1, 1.5, math.nan, math.inf, True, "0.5", None])
def test_bad_spot_fractions_are_refused(fraction: object) -> None:
    with pytest.raises(ElasticGridError, match="max_spot_fraction"):
        GridPlanner(DEFAULT_PROVIDERS, max_spot_fraction=fraction)  # type: ignore[arg-type]


@pytest.mark.parametrize("prefer", ["cheap", "", "COST", None])
def test_bad_preferences_are_refused(prefer: object) -> None:
    with pytest.raises(ElasticGridError, match="prefer"):
        GridPlanner(DEFAULT_PROVIDERS, prefer=prefer)  # type: ignore[arg-type]


def test_duplicate_provider_names_are_refused() -> None:
    providers = (*DEFAULT_PROVIDERS, Provider("aws", max_nodes=1, cost_per_node_hour=1.0))
    with pytest.raises(ElasticGridError, match="'aws' appears more than once"):
        GridPlanner(providers)


@pytest.mark.parametrize("providers", [None, 5, "aws", [{"name": "aws"}]])
def test_providers_that_are_not_providers_are_refused(providers: object) -> None:
    with pytest.raises(ElasticGridError, match="providers"):
        GridPlanner(providers)  # type: ignore[arg-type]


def test_planner_accepts_any_iterable_and_keeps_a_tuple() -> None:
    planner = GridPlanner(iter(DEFAULT_PROVIDERS), max_spot_fraction=1)  # type: ignore[arg-type]
    assert planner.providers == DEFAULT_PROVIDERS
    assert planner.max_spot_fraction == 1.0
    assert isinstance(planner.max_spot_fraction, float)
    assert planner.capacity == 168
    assert planner.on_demand_capacity == 8


# ---------------------------------------------------------------------------
# Planning against the free capacity other jobs leave.
# ---------------------------------------------------------------------------


def test_a_second_job_of_eight_goes_where_the_first_left_room() -> None:
    planner = GridPlanner(DEFAULT_PROVIDERS)
    first = planner.plan(8)
    second = planner.plan(8, held_by_others=first.nodes_by_provider())
    assert second.nodes_by_provider() == {"aws": 8}
    # the share names the grid's own provider, with its whole capacity
    assert second.assignments[0].provider == next(p for p in DEFAULT_PROVIDERS if p.name == "aws")
    assert second.assignments[0].provider.max_nodes == 64


def test_a_partly_held_provider_offers_its_remainder() -> None:
    placement = GridPlanner(DEFAULT_PROVIDERS).plan(10, held_by_others={"local": 5})
    assert placement.nodes_by_provider() == {"local": 3, "aws": 7}


def test_not_enough_free_capacity_says_how_much_others_hold() -> None:
    providers = (Provider("local", max_nodes=4, cost_per_node_hour=0.0, spot=False),)
    with pytest.raises(NotEnoughCapacityError) as raised:
        GridPlanner(providers).plan(2, held_by_others={"local": 3, "elsewhere": 7})
    assert str(raised.value) == (
        "nodes 2 exceeds the grid's free capacity of 1 nodes: other jobs hold 3 of its 4 nodes"
    )
    assert isinstance(raised.value, ElasticGridError)  # the same failure as before, for callers


def test_a_provider_held_in_full_is_skipped_even_from_the_spot_allowance() -> None:
    providers = (
        Provider("od", max_nodes=4, cost_per_node_hour=1.0, spot=False),
        Provider("spot", max_nodes=4, cost_per_node_hour=0.5, spot=True),
    )
    planner = GridPlanner(providers, max_spot_fraction=0.0)
    # with od held in full, spot must take all: the allowance counts only free on-demand
    assert planner.plan(3, held_by_others={"od": 4}).nodes_by_provider() == {"spot": 3}


@pytest.mark.parametrize("count", [-1, 1.5, math.nan, "2", True])
def test_bad_held_counts_are_refused_naming_the_provider(count: object) -> None:
    with pytest.raises(ElasticGridError, match=r"^held_by_others 'local' must be"):
        GridPlanner(DEFAULT_PROVIDERS).plan(1, held_by_others={"local": count})  # type: ignore[dict-item]


@settings(max_examples=100, deadline=None)
@given(cases(), st.sampled_from(PREFER_CHOICES))
def test_nothing_held_plans_exactly_as_before(case: Case, prefer: str) -> None:
    planner = GridPlanner(case.providers, case.fraction, prefer)
    before = planner.plan(case.nodes)
    assert planner.plan(case.nodes, held_by_others={}) == before
    zeros = {provider.name: 0 for provider in case.providers}
    assert planner.plan(case.nodes, held_by_others=zeros) == before


@settings(max_examples=200, deadline=None)
@given(cases(), st.sampled_from(PREFER_CHOICES), st.data())
def test_held_nodes_plan_like_a_grid_of_the_free_remainder(
    case: Case, prefer: str, data: st.DataObject
) -> None:
    held = {
        p.name: data.draw(st.integers(0, p.max_nodes + 2), label=p.name) for p in case.providers
    }
    free = tuple(
        replace(p, max_nodes=p.max_nodes - held[p.name])
        for p in case.providers
        if p.max_nodes > held[p.name]
    )
    planner = GridPlanner(case.providers, case.fraction, prefer)
    if case.nodes > sum(p.max_nodes for p in free):
        with pytest.raises(NotEnoughCapacityError, match="other jobs hold"):
            planner.plan(case.nodes, held_by_others=held)
        return
    placement = planner.plan(case.nodes, held_by_others=held)
    expected = GridPlanner(free, case.fraction, prefer).plan(case.nodes)
    assert placement.nodes_by_provider() == expected.nodes_by_provider()
    for share in placement.assignments:
        assert share.nodes + held[share.provider.name] <= share.provider.max_nodes
        assert share.provider in case.providers
