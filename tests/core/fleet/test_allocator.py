"""The one allocator (core/fleet/allocator.py) on small hand-made grids: the five cases of
issue 34 first, then one test per rule."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from elasticgrid_provider.core.fleet.allocator import (
    accepting,
    allocate,
    decide_shortfall,
    ordered,
    plan_preemption,
)
from elasticgrid_provider.core.fleet.ledger import (
    CapacityRequest,
    GridLedger,
    QueuedRequest,
    confirm,
    enqueue,
    note_standing,
    queue_order,
    reserve,
)
from elasticgrid_provider.core.fleet.sharing import JobClaim, ShortfallMode, Verdict
from elasticgrid_provider.core.policy.claim import deadline_need, holder_claims, room_for
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.policy.rules import DecisionRule
from elasticgrid_provider.hooks.grid_capacity import _queued, decide_request

T0 = 1_800_000_000.0
GRID = {"local": 12}


def claim(job: str, nodes: int, wanted: int, **fields: Any) -> JobClaim:
    return JobClaim(job=job, nodes=nodes, wanted=wanted, **fields)


def holding(ledger: GridLedger, job: str, nodes: int, *, priority: int = 0, min_nodes: int = 1,
            capacities: dict[str, int] = GRID) -> GridLedger:  # fmt: skip
    launch = f"20260101T000000-{job}"
    ledger = reserve(ledger, job, {"local": nodes}, launch_id=launch, now=T0,
                     capacities=capacities, priority=priority, min_nodes=min_nodes)  # fmt: skip
    return confirm(ledger, job, launch, now=T0)


# -- the five cases of the issue -------------------------------------------------------------


def test_case_1_the_sensors_room_is_what_the_plan_grants() -> None:
    # 'a' holds 4 and its deadline needs 8; 'c', a launch of the same priority, queued earlier
    ledger = holding(holding(GridLedger(), "a", 4), "b", 4)  # 4 of 12 free
    ledger = enqueue(ledger, QueuedRequest("c", 4, 2, T0 - 100), now=T0 - 100)
    mine = QueuedRequest("a", 8, 4, T0, current_nodes=4, deadline_nodes=8, slack_s=60.0)
    room = room_for(ledger, mine, GRID)
    ledger = enqueue(ledger, mine, now=T0)
    decision = decide_request(ledger, CapacityRequest("a", room, 4), GRID)
    assert room == 8  # its deadline is at risk and reachable: it goes before the launch
    assert (decision.verdict, decision.nodes) == (Verdict.GRANTED, 8)


def test_case_1_a_replan_keeps_the_claim_the_sensor_wrote_and_its_place() -> None:
    ledger = holding(GridLedger(), "a", 4)
    sensor = QueuedRequest("a", 8, 4, T0 - 50, current_nodes=4, gain_per_node=0.7,
                           deadline_nodes=8, slack_s=60.0, remaining_s=900.0)  # fmt: skip
    ledger = enqueue(ledger, sensor, now=T0 - 50)
    after = _queued(ledger, CapacityRequest("a", 8, 4), T0)
    (entry,) = after.queue  # one entry per job
    assert (entry.since, entry.deadline_nodes, entry.slack_s) == (T0 - 50, 8, 60.0)
    assert (entry.gain_per_node, entry.remaining_s, entry.renewed_at) == (0.7, 900.0, T0)


def test_case_2_preemption_never_pushes_a_victim_into_missing_its_deadline() -> None:
    ledger = holding(GridLedger(), "low", 6, min_nodes=2, capacities={"local": 8})
    standing = QueuedRequest("low", 6, 6, T0, current_nodes=6, deadline_nodes=6, slack_s=100.0)
    ledger = note_standing(ledger, standing, now=T0)
    victims = holder_claims(ledger, "high")
    assert victims[0].deadline_nodes == 6  # the victim's side is known
    launch = accepting(claim("high", 0, 4, min_nodes=4, priority=1), ShortfallMode.WAIT)
    plan = plan_preemption(launch, {"local": 2}, victims)
    assert (plan.shrinks, plan.granted) == ((), 0)  # it meets its deadline only at 6: spared
    saving = claim("high", 2, 4, min_nodes=2, priority=1, deadline_nodes=4, slack_s=10.0)
    plan = plan_preemption(saving, {"local": 0}, victims)  # a higher priority's deadline
    assert [(s.job, s.to_nodes) for s in plan.shrinks] == [("low", 4)]


def test_case_3_a_waiting_launch_preempts_only_when_the_result_fits_its_request() -> None:
    victims = [claim("low", 7, 7, min_nodes=4)]
    waits = accepting(claim("high", 0, 6, min_nodes=2, priority=1), ShortfallMode.WAIT)
    plan = plan_preemption(waits, {"p": 1}, victims)  # 1 + 3 freed = 4 < 6: nobody shrinks
    assert (plan.shrinks, plan.granted) == ((), 0)
    takes = accepting(claim("high", 0, 6, min_nodes=2, priority=1), ShortfallMode.TAKE_WHAT_FITS)
    plan = plan_preemption(takes, {"p": 1}, victims)
    assert [(s.job, s.to_nodes) for s in plan.shrinks] == [("low", 6)]
    assert plan.granted == 2


def test_case_4_a_hopeless_job_competes_without_its_deadline_and_keeps_running() -> None:
    lost = claim("lost", 2, 6, deadline_nodes=6, slack_s=-100.0, remaining_s=600.0)
    able = claim("able", 2, 4, deadline_nodes=4, slack_s=300.0, remaining_s=600.0)
    plan = allocate([lost, able], 2, capacity=8)
    assert (plan.nodes("able"), plan.nodes("lost")) == (4, 2)
    assert plan.results["lost"].hopeless and not plan.results["able"].hopeless
    assert [c.job for c in ordered([lost, able])] == ["able", "lost"]
    too_big = claim("big", 2, 16, deadline_nodes=16, slack_s=10.0)  # beyond the grid
    assert allocate([too_big], 0, capacity=8).results["big"].hopeless
    missed = SimpleNamespace(rule=DecisionRule.DEADLINE_PRESSURE, current_nodes=4,
                             target_nodes=8, time_left_s=100.0,
                             projection={"target_finish_s": 400.0})  # fmt: skip
    size, slack = deadline_need(missed, ScalePolicy(startup_s=30))  # type: ignore[arg-type]
    assert (size, slack) == (8, 100.0 - 400.0 - 30.0)  # below 0: hopeless


def test_case_5_a_high_priority_stream_takes_part_with_its_demand() -> None:
    demand = SimpleNamespace(rule=DecisionRule.DEMAND, current_nodes=2, target_nodes=4,
                             time_left_s=None, projection={})  # fmt: skip
    assert deadline_need(demand, ScalePolicy()) == (4, None)  # type: ignore[arg-type]
    stream = claim("stream", 2, 4, priority=2, deadline_nodes=4, remaining_s=3600.0)
    batch = claim("batch", 6, 6, min_nodes=2, priority=0, remaining_s=3600.0)
    plan = allocate([batch, stream], 0)
    assert (plan.nodes("stream"), plan.nodes("batch")) == (4, 4)
    assert plan.shrinks[0].preempted_by == "stream"
    assert plan.order == ("stream", "batch")


# -- one test per rule -----------------------------------------------------------------------


def test_the_order_is_priority_then_need_then_launches_then_gain() -> None:
    claims = [
        claim("grow-fast", 2, 4, remaining_s=600.0, gain_per_node=1.0),
        claim("grow-slow", 2, 4, remaining_s=600.0, gain_per_node=0.2),
        claim("launch", 0, 2),
        claim("tight", 2, 4, deadline_nodes=4, slack_s=10.0),
        claim("loose", 2, 6, deadline_nodes=6, slack_s=400.0),  # 100 s per node lacked
        claim("urgent", 0, 1, priority=1),
    ]
    assert [c.job for c in ordered(claims)] == [
        "urgent", "tight", "loose", "launch", "grow-fast", "grow-slow",
    ]  # fmt: skip


def test_a_queue_position_survives_a_replan() -> None:
    ledger = GridLedger(capacities={"local": 4})
    ledger = enqueue(ledger, QueuedRequest("first", 4, 4, T0), now=T0)
    ledger = enqueue(ledger, QueuedRequest("second", 4, 4, T0 + 1), now=T0 + 1)
    again = enqueue(ledger, QueuedRequest("first", 4, 4, T0 + 9), now=T0 + 9)  # plans again
    assert [r.job for r in queue_order(again)] == ["first", "second"]
    decision = decide_shortfall(claim("second", 0, 4, since=T0 + 1), {"local": 0},
                                queued=[r.as_claim() for r in again.queue])  # fmt: skip
    assert (decision.verdict, decision.queue_position) == (Verdict.WAITING, 2)


def test_a_waiting_launch_holds_the_free_nodes_it_needs() -> None:
    plan = allocate([claim("launch", 0, 4, accepts=4), claim("runner", 2, 6, remaining_s=1e4)], 3)
    assert (plan.nodes("launch"), plan.nodes("runner")) == (0, 2)  # the runner's end: unknown
    assert plan.queue == ("launch", "runner")
    assert "needs 4 nodes and 3 are free (3 held for it)" in plan.results["launch"].reason
    assert plan.free_left == 3


def test_nodes_a_waiting_launch_will_not_need_go_to_small_launches_behind_it() -> None:
    head = claim("big", 0, 6, accepts=6, since=T0)
    ending = claim("ending", 5, 5, ends_in_s=600.0)  # frees 5 in 10 minutes
    stream = claim("stream", 4, 4)  # its end is not known: never counted
    small = claim("small", 0, 2, accepts=2, since=T0 + 1)
    larger = claim("larger", 0, 3, accepts=3, since=T0 + 2)
    plan = allocate([head, ending, stream, larger, small], 3, capacity=96)
    # once ending's 5 come free, big needs 6 of 3 + 5: 2 of the 3 free now are spare
    assert (plan.nodes("big"), plan.nodes("small"), plan.nodes("larger")) == (0, 2, 0)
    assert "needs 6 nodes and 3 are free (1 held for it)" in plan.results["big"].reason
    assert plan.free_left == 1 and plan.queue == ("big", "larger")
    unknown = allocate([head, replace(ending, ends_in_s=None), stream, small], 3, capacity=96)
    assert (unknown.nodes("small"), unknown.free_left) == (0, 3)  # no known end: all held
    never = allocate([head, claim("ending", 2, 2, ends_in_s=60.0), stream, small], 3, capacity=96)
    assert never.nodes("small") == 0  # 3 + 2 never reach 6: nothing is spare


def test_only_a_small_need_takes_spare_nodes_and_nobody_grows_into_them() -> None:
    head = claim("big", 0, 6, accepts=6, since=T0)
    ending = claim("ending", 5, 5, ends_in_s=600.0)
    small = claim("small", 0, 2, accepts=2, since=T0 + 1)
    assert allocate([head, ending, small], 3, capacity=32).nodes("small") == 2  # 2 <= 32 / 16
    assert allocate([head, ending, small], 3, capacity=16).nodes("small") == 0  # 2 > 16 / 16
    assert allocate([head, ending, small], 3).nodes("small") == 0  # the grid's size unknown
    grower = claim("grower", 2, 4, remaining_s=1e4)
    plan = allocate([head, ending, grower], 3, capacity=96)
    assert (plan.nodes("grower"), plan.free_left) == (2, 3)  # 2 are spare, but growth waits


def test_growth_must_repay_its_restart_and_a_shrunk_job_does_not_grow_back() -> None:
    almost_done = claim("done", 4, 8, remaining_s=10.0, restart_s=60.0)
    plan = allocate([almost_done], 4)
    assert plan.nodes("done") == 4 and "restart" in plan.results["done"].reason
    urgent = claim("urgent", 0, 3, min_nodes=3, priority=1)
    low = claim("low", 4, 8, min_nodes=1, remaining_s=1e5)
    plan = allocate([urgent, low], 1)
    assert (plan.nodes("urgent"), plan.nodes("low"), plan.free_left) == (3, 2, 0)


def test_equal_priorities_never_shrink_each_other() -> None:
    plan = allocate([claim("a", 0, 4, accepts=4), claim("b", 6, 6, min_nodes=1)], 0)
    assert (plan.nodes("a"), plan.nodes("b"), plan.shrinks) == (0, 6, ())


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 6), st.integers(0, 8), st.integers(1, 3), st.integers(0, 2),
                  st.integers(0, 8), st.floats(-50, 500)),
        min_size=1, max_size=6,
    ),
    st.integers(0, 10),
)  # fmt: skip
def test_the_allocator_never_over_subscribes_nor_shrinks_below_min(
    rows: list[tuple[int, int, int, int, int, float]], free: int
) -> None:
    claims = [
        claim(f"j{i}", nodes, max(nodes, wanted, min_nodes), min_nodes=min_nodes,
              priority=priority, deadline_nodes=deadline, slack_s=slack, remaining_s=100.0)
        for i, (nodes, wanted, min_nodes, priority, deadline, slack) in enumerate(rows)
    ]  # fmt: skip
    plan = allocate(claims, free, capacity=free + sum(c.nodes for c in claims))
    assert sum(plan.nodes(c.job) for c in claims) <= free + sum(c.nodes for c in claims)
    assert plan.free_left >= 0
    for c in claims:
        after = plan.nodes(c.job)
        assert after <= max(c.wanted, c.nodes)
        if after < c.nodes:
            assert after >= c.min_nodes and plan.results[c.job].preempted_by
    assert sorted(r.position for r in plan.results.values() if r.queued) == list(
        range(1, len(plan.queue) + 1)
    )
