"""The sharing rules: shortfall modes, preemption toward min_nodes, sharing free nodes by gain."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.fleet.allocator import allocate, decide_shortfall, plan_preemption
from elasticgrid_provider.core.fleet.sharing import (
    DEFAULT_SHORTFALL_MODE,
    JobClaim,
    Resize,
    ShortfallMode,
    Verdict,
    gain_per_node,
)

HOLDINGS = {"b": {"local": 4}, "c": {"local": 1, "aws": 2}, "a": {"local": 9}}


def claim(job: str, nodes: int, wanted: int, **fields: object) -> JobClaim:
    return JobClaim(job=job, nodes=nodes, wanted=wanted, **fields)  # type: ignore[arg-type]


# -- shortfall ------------------------------------------------------------------------


def test_the_default_shortfall_mode_is_wait():
    assert DEFAULT_SHORTFALL_MODE is ShortfallMode.WAIT


def test_a_request_that_fits_is_granted_its_wanted_size():
    decision = decide_shortfall(claim("a", 0, 4, min_nodes=2), {"local": 3, "aws": 2})
    assert (decision.verdict, decision.nodes) == (Verdict.GRANTED, 4)


def test_a_scale_up_is_granted_on_top_of_what_it_holds():
    decision = decide_shortfall(claim("a", 3, 5), {"local": 2})
    assert (decision.verdict, decision.nodes) == (Verdict.GRANTED, 5)


def test_wait_gives_a_queue_position_behind_higher_and_earlier_requests():
    queued = [
        claim("early-same", 0, 2, priority=1),
        claim("a", 0, 4, priority=1),
        claim("late-higher", 0, 2, priority=5),
        claim("late-same", 0, 2, priority=1),
        claim("lower", 0, 1, priority=0),
    ]
    queued = [replace(c, since=float(i)) for i, c in enumerate(queued)]  # arrival order
    request = queued[1]
    decision = decide_shortfall(request, {"local": 3}, queued=queued)
    assert (decision.verdict, decision.nodes, decision.queue_position) == (Verdict.WAITING, 0, 3)


def test_requests_ahead_keep_their_min_nodes_free():
    queued = [claim("first", 0, 4, min_nodes=2, since=-1.0)]
    # 5 free, 2 kept for the request ahead: 3 left, not the 4 wanted
    assert decide_shortfall(claim("a", 0, 4), {"p": 5}, queued=queued).verdict == Verdict.WAITING
    taken = decide_shortfall(
        claim("a", 0, 4), {"p": 5}, queued=queued, mode=ShortfallMode.TAKE_WHAT_FITS
    )  # the needs first (2 and 1), then the wishes in the same order: 'first' grows to 4
    assert (taken.verdict, taken.nodes) == (Verdict.GRANTED, 1)


def test_take_what_fits_takes_the_free_nodes_at_or_above_min_nodes_else_waits():
    mode = ShortfallMode.TAKE_WHAT_FITS
    taken = decide_shortfall(claim("a", 0, 8, min_nodes=2), {"local": 3}, mode=mode)
    assert (taken.verdict, taken.nodes) == (Verdict.GRANTED, 3)
    short = decide_shortfall(claim("a", 0, 8, min_nodes=4), {"local": 3}, mode=mode)
    assert (short.verdict, short.nodes, short.queue_position) == (Verdict.WAITING, 0, 1)


def test_take_what_fits_grows_a_running_job_by_what_is_free():
    decision = decide_shortfall(
        claim("a", 2, 8, min_nodes=2), {"local": 1}, mode=ShortfallMode.TAKE_WHAT_FITS
    )
    assert (decision.verdict, decision.nodes) == (Verdict.GRANTED, 3)


def test_fail_names_the_jobs_that_hold_the_capacity_largest_first():
    decision = decide_shortfall(
        claim("a", 0, 8), {"local": 1}, mode=ShortfallMode.FAIL, holdings=HOLDINGS
    )
    assert decision.verdict == Verdict.FAILED and decision.nodes == 0
    assert decision.reason == (
        "job 'a' wants 8 more nodes but 1 is free: 'b' holds 4 on local; "
        "'c' holds 2 on aws and 1 on local"
    )


def test_a_shortfall_mode_is_one_of_its_words():
    with pytest.raises(ValueError, match="'later'"):
        decide_shortfall(claim("a", 0, 8), {"local": 1}, mode="later")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("free", "field"),
    [({"local": -1}, "free nodes of 'local'"), ({"local": math.nan}, "free nodes of 'local'")],
)
def test_bad_free_counts_are_refused_naming_the_provider(free, field):
    with pytest.raises(ElasticGridError, match=f"^{field} must be"):
        decide_shortfall(claim("a", 0, 1), free)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"nodes": -1}, "nodes must be at least 0, got -1"),
        ({"priority": 1.5}, "priority must be a whole number, got 1.5"),
        ({"gain_per_node": math.inf}, "gain_per_node must be a finite number, got inf"),
        ({"wanted": 1, "min_nodes": 2}, "wanted 1 is below its min_nodes 2"),
    ],
)
def test_a_bad_claim_is_one_sentence_naming_the_field(fields, message):
    values = {"job": "a", "nodes": 0, "wanted": 2, **fields}
    with pytest.raises(ElasticGridError, match=message):
        JobClaim(**values)


# -- preemption -------------------------------------------------------------------------


def running(job: str, nodes: int, priority: int, **fields: object) -> JobClaim:
    values: dict[str, object] = {"min_nodes": 1, "remaining_s": 3600.0, **fields}
    return claim(job, nodes, nodes, priority=priority, **values)


def test_a_higher_priority_request_shrinks_lower_ones_toward_min_nodes_lowest_first():
    claims = [
        running("mid", 4, 1, min_nodes=2),
        running("low", 3, 0, min_nodes=2),
        running("peer", 6, 5),
        running("rigid", 6, 0, elastic=False),
    ]
    plan = plan_preemption(claim("urgent", 0, 6, priority=5, min_nodes=4), {"local": 1}, claims)
    assert sorted(plan.shrinks, key=lambda s: s.job) == [
        Resize("low", 3, 2, preempted_by="urgent"),
        Resize("mid", 4, 2, preempted_by="urgent"),
    ]
    assert (plan.nodes_freed, plan.granted) == (3, 4)


def test_others_are_shrunk_for_what_a_request_needs_not_all_it_wants():
    # it needs 2 (its min_nodes) and wants 6: one node is free, one more is taken from 'low';
    # it grows toward 6 later, from nodes that free up
    plan = plan_preemption(
        claim("urgent", 0, 6, priority=5, min_nodes=2), {"local": 1}, [running("low", 4, 0)]
    )
    assert plan.shrinks == (Resize("low", 4, 3, preempted_by="urgent"),)
    assert (plan.nodes_freed, plan.granted) == (1, 2)


def test_equal_priority_jobs_are_never_shrunk_for_each_other():
    plan = plan_preemption(claim("a", 0, 4, priority=1), {"p": 0}, [running("b", 8, 1)])
    assert (plan.shrinks, plan.granted) == ((), 0)


def test_nothing_is_shrunk_when_the_request_still_would_not_reach_min_nodes():
    claims = [running("low", 3, 0, min_nodes=2)]
    plan = plan_preemption(claim("a", 0, 6, priority=1, min_nodes=4), {"p": 1}, claims)
    assert (plan.shrinks, plan.granted) == ((), 0)


def test_a_request_that_fits_shrinks_nobody():
    plan = plan_preemption(claim("a", 0, 2, priority=9), {"p": 2}, [running("low", 4, 0)])
    assert (plan.shrinks, plan.granted) == ((), 2)


def test_within_a_priority_the_job_losing_least_net_of_its_restart_is_shrunk_first():
    efficient = running("efficient", 4, 0, gain_per_node=1.0)
    wasteful = running("wasteful", 4, 0, gain_per_node=0.2)
    plan = plan_preemption(claim("a", 0, 2, priority=1, min_nodes=2), {}, [efficient, wasteful])
    assert plan.shrinks == (Resize("wasteful", 4, 2, preempted_by="a"),)


def test_a_job_a_shrink_would_put_behind_its_deadline_is_shrunk_last_within_its_priority():
    on_deadline = running("on-deadline", 4, 0, gain_per_node=0.1, deadline_nodes=4)
    no_deadline = running("no-deadline", 4, 0, gain_per_node=1.0)
    plan = plan_preemption(
        claim("a", 0, 2, priority=1, min_nodes=2), {}, [on_deadline, no_deadline]
    )
    assert plan.shrinks == (Resize("no-deadline", 4, 2, preempted_by="a"),)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 8), st.integers(1, 8), st.integers(0, 3), st.booleans()),
        max_size=6,
    ),
    st.integers(0, 4),
    st.integers(1, 20),
    st.integers(0, 3),
)
def test_preemption_never_goes_below_min_nodes_nor_touches_equal_or_higher(
    shapes, free, wanted, priority
):
    claims = [
        running(f"j{i}", max(a, b), level, min_nodes=min(a, b), elastic=elastic)
        for i, (a, b, level, elastic) in enumerate(shapes)
    ]
    request = claim("req", 0, wanted, priority=priority, min_nodes=max(1, wanted // 2))
    plan = plan_preemption(request, {"p": free}, claims)
    by_job = {c.job: c for c in claims}
    for shrink in plan.shrinks:
        victim = by_job[shrink.job]
        assert victim.elastic and victim.priority < priority
        assert victim.min_nodes <= shrink.to_nodes < shrink.from_nodes == victim.nodes
    assert plan.granted <= wanted
    assert plan.granted == 0 or plan.granted >= request.min_nodes
    assert plan.granted <= free + plan.nodes_freed


# -- sharing by gain (the allocator's wishes pass) ---------------------------------------


def share_free_nodes(free: dict[str, int], claims: list[JobClaim]) -> tuple[Resize, ...]:
    """The growths the allocator gives, by name."""
    plan = allocate(claims, sum(free.values()), preempt=False)
    return tuple(
        Resize(job, r.from_nodes, r.to_nodes)
        for job, r in sorted(plan.results.items())
        if r.to_nodes > r.from_nodes
    )


def grower(job: str, nodes: int, wanted: int, **fields: object) -> JobClaim:
    values: dict[str, object] = {"remaining_s": 3600.0, "restart_s": 60.0, **fields}
    return claim(job, nodes, wanted, **values)


def test_priority_goes_first():
    resizes = share_free_nodes({"p": 2}, [grower("low", 2, 6), grower("high", 2, 6, priority=1)])
    assert resizes == (Resize("high", 2, 4),)


def test_a_job_behind_its_deadline_gets_its_whole_gap_before_throughput():
    claims = [grower("fast", 2, 8, gain_per_node=1.0), grower("late", 2, 5, deadline_nodes=5,
                                                               gain_per_node=0.5)]  # fmt: skip
    assert share_free_nodes({"p": 4}, claims) == (Resize("fast", 2, 3), Resize("late", 2, 5))


def test_then_the_most_throughput_per_node_net_of_the_restart():
    claims = [grower("linear", 4, 6, gain_per_node=1.0), grower("flat", 4, 6, gain_per_node=0.3)]
    assert share_free_nodes({"p": 2}, claims) == (Resize("linear", 4, 6),)


def test_a_job_gaining_less_than_its_restart_price_gets_nothing():
    almost_done = grower("done-soon", 8, 16, remaining_s=30.0, restart_s=60.0)
    assert share_free_nodes({"p": 8}, [almost_done]) == ()


def test_the_first_step_is_the_smallest_that_repays_the_restart():
    # one node gains 100 node-s per node, the restart at n+k costs 50*(10+k): k > 50*10/50 = 10
    job = grower("big", 10, 30, remaining_s=100.0, restart_s=50.0)
    assert share_free_nodes({"p": 10}, [job]) == ()
    assert share_free_nodes({"p": 11}, [job]) == (Resize("big", 10, 21),)


def test_a_queued_launch_starts_at_its_min_nodes_at_least():
    launch = claim("new", 0, 6, min_nodes=4)
    assert share_free_nodes({"p": 3}, [launch]) == ()
    # it needs its min_nodes, then takes what is free up to what it wants
    assert share_free_nodes({"p": 5}, [launch]) == (Resize("new", 0, 5),)
    measured = claim("new", 0, 6, min_nodes=4, remaining_s=600.0, restart_s=60.0)
    assert share_free_nodes({"p": 5}, [measured]) == (Resize("new", 0, 5),)


def test_a_queued_launch_starts_at_the_size_its_deadline_needs_or_waits():
    launch = claim("new", 0, 8, min_nodes=2, deadline_nodes=6)
    assert share_free_nodes({"p": 5}, [launch]) == ()  # 5 would start it too late
    assert share_free_nodes({"p": 6}, [launch]) == (Resize("new", 0, 6),)


def test_a_waiting_launch_holds_the_free_nodes_it_needs_against_growth():
    # 'new' needs 4 and 3 are free: they stay free for it, not given to 'runner' to grow
    launch, runner = claim("new", 0, 6, min_nodes=4), grower("runner", 2, 8)
    assert share_free_nodes({"p": 3}, [launch, runner]) == ()
    # a job of a higher priority behind its deadline is served first all the same
    urgent = grower("urgent", 2, 5, priority=1, deadline_nodes=5)
    assert share_free_nodes({"p": 3}, [launch, runner, urgent]) == (Resize("urgent", 2, 5),)


def test_a_queued_launch_goes_before_a_running_job_at_the_same_priority():
    launch = claim("new", 0, 3, min_nodes=3, deadline_nodes=3)
    late = grower("late", 2, 5, deadline_nodes=5)
    assert share_free_nodes({"p": 3}, [late, launch]) == (Resize("new", 0, 3),)


def test_deadline_risk_goes_before_throughput_whatever_the_priority():
    late = grower("late-low", 2, 4, deadline_nodes=4)
    fast = grower("fast-high", 2, 8, priority=2)
    assert share_free_nodes({"p": 3}, [fast, late]) == (
        Resize("fast-high", 2, 3),
        Resize("late-low", 2, 4),
    )


def test_ties_are_broken_by_name_whatever_the_order():
    claims = [grower("b", 2, 3), grower("a", 2, 3)]
    assert share_free_nodes({"p": 1}, claims) == share_free_nodes({"p": 1}, claims[::-1])
    assert share_free_nodes({"p": 1}, claims) == (Resize("a", 2, 3),)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 6), st.integers(0, 10), st.integers(0, 2)), max_size=6),
    st.integers(0, 12),
)
def test_sharing_never_hands_out_more_than_is_free_nor_more_than_wanted(shapes, free):
    claims = [
        grower(f"j{i}", nodes, max(nodes, wanted), priority=level)
        for i, (nodes, wanted, level) in enumerate(shapes)
    ]
    resizes = share_free_nodes({"p": free}, claims)
    by_job = {c.job: c for c in claims}
    assert sum(r.to_nodes - r.from_nodes for r in resizes) <= free
    for resize in resizes:
        assert by_job[resize.job].nodes < resize.to_nodes <= by_job[resize.job].wanted


def test_gain_per_node_from_measured_throughput():
    linear = {1: 10.0, 2: 20.0, 4: 40.0}
    assert gain_per_node(linear, 2, 4) == pytest.approx(1.0)
    sublinear = {1: 10.0, 2: 18.0, 4: 30.0}
    assert gain_per_node(sublinear, 2, 4) == pytest.approx((30.0 - 18.0) / 2 / 9.0)
    assert gain_per_node(sublinear, 4, 8) == pytest.approx(6.0 / 7.5)  # the last slope goes on
    assert gain_per_node({}, 3, 5) == pytest.approx(1.0)
    with pytest.raises(ElasticGridError, match="to_nodes 2 must be above nodes 2"):
        gain_per_node(linear, 2, 2)
