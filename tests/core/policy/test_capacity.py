"""The policy on a shared grid: the capacity clamp and hold, the preempted rule, and the
job's claim read from a real grid ledger (core/policy/grid.py, claim.py)."""

from __future__ import annotations

from typing import Any

import pytest

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.fleet.allocator import accepting, plan_preemption
from elasticgrid_provider.core.fleet.ledger import (
    GridLedger,
    QueuedRequest,
    ShrinkRequest,
    confirm,
    enqueue,
    reserve,
)
from elasticgrid_provider.core.fleet.sharing import JobClaim, ShortfallMode
from elasticgrid_provider.core.policy.claim import (
    SharedGrid,
    claim_the_grid,
    grid_share,
    holder_claims,
    job_request,
    room_for,
)
from elasticgrid_provider.core.policy.controller import decide
from elasticgrid_provider.core.policy.decision import Recommendation, ScaleDecision
from elasticgrid_provider.core.policy.grid import GridShare
from elasticgrid_provider.core.policy.memory import CapacityMemory, SizeMeasurement
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.policy.rules import DecisionRule, HoldRule, ScaleAction
from elasticgrid_provider.core.state import ScaleState
from tests.core.policy.windows import BALANCED_8, QUEUED_8, RECENT_UP, T0, steady

HOLDERS = {"b": {"local": 20}, "c": {"cloud": 4}}
CAPACITIES = {"local": 24, "cloud": 8}


def _condition(decision: ScaleDecision, kind: str) -> tuple[bool, str, str]:
    found = next(c for c in decision.conditions if c.type == kind)
    return found.status, found.reason, found.message


def _shrink(to_nodes: int, by_job: str = "urgent", by_priority: int = 5) -> ShrinkRequest:
    return ShrinkRequest("a", to_nodes, by_job, by_priority, T0 - 10)


# -- the policy: clamp, hold, preempted ------------------------------------------------


def test_without_a_limit_or_a_shrink_the_grid_changes_no_decision() -> None:
    alone = decide(ScalePolicy(), QUEUED_8, now=T0)
    shared = decide(ScalePolicy(), QUEUED_8, now=T0, grid=GridShare(job="a", holders=HOLDERS))
    assert (shared.action, shared.target_nodes, shared.rule) == (
        alone.action,
        alone.target_nodes,
        alone.rule,
    )
    assert shared.conditions == alone.conditions
    assert alone.grid is None and shared.preempted_by is None


def test_a_scale_up_beyond_the_room_is_clamped_to_it_and_scaling_limited_says_why() -> None:
    unlimited = decide(ScalePolicy(), QUEUED_8, now=T0)
    assert unlimited.target_nodes > 12
    grid = GridShare(job="a", max_nodes=12, holders=HOLDERS)
    decision = decide(ScalePolicy(), QUEUED_8, now=T0, grid=grid)
    assert (decision.action, decision.current_nodes, decision.target_nodes) == (
        ScaleAction.SCALE_UP,
        8,
        12,
    )
    assert "the shared grid leaves this job 12 nodes" in decision.reason
    assert decision.recommended_nodes == unlimited.target_nodes  # what it wants, unclamped
    status, reason, message = _condition(decision, "ScalingLimited")
    assert (status, reason) == (True, "GridCapacity")
    assert "'b' holds 20 on local; 'c' holds 4 on cloud" in message
    assert message.endswith("so at most 12 nodes")
    assert decision.grid == grid  # the record keeps who held what


def test_a_scale_up_with_no_free_node_holds_for_capacity_naming_the_holders() -> None:
    grid = GridShare(job="a", max_nodes=8, holders=HOLDERS)
    decision = decide(ScalePolicy(), QUEUED_8, now=T0, grid=grid)
    assert (decision.action, decision.target_nodes, decision.rule) == (
        ScaleAction.HOLD,
        8,
        DecisionRule.QUEUE_BOUND,
    )
    assert [hold.rule for hold in decision.held_by] == [HoldRule.CAPACITY]
    assert decision.held_by[0].reason == (
        "the shared grid has no free node for it: job 'a' wants 32 more nodes but 0 are "
        "free: 'b' holds 20 on local; 'c' holds 4 on cloud"
    )
    assert "holding at 8 instead of scaling up to 40" in decision.reason
    assert _condition(decision, "AbleToScale")[:2] == (False, "NoFreeNodes")
    assert _condition(decision, "ScalingLimited")[:2] == (True, "GridCapacity")
    assert ScaleDecision.model_validate_json(decision.model_dump_json()) == decision


def test_a_capacity_hold_stands_beside_a_cooldown() -> None:
    grid = GridShare(job="a", max_nodes=8, holders=HOLDERS)
    decision = decide(ScalePolicy(), QUEUED_8, now=T0, cooldown=RECENT_UP, grid=grid)
    assert [hold.rule for hold in decision.held_by] == [HoldRule.COOLDOWN, HoldRule.CAPACITY]
    assert _condition(decision, "AbleToScale")[1] == "BackoffUp"


def test_a_bounds_correction_up_is_held_for_capacity_too() -> None:
    policy = ScalePolicy(min_nodes=4)
    grid = GridShare(job="a", max_nodes=2, holders=HOLDERS)
    decision = decide(policy, steady(2), now=T0, grid=grid)
    assert (decision.action, decision.rule) == (ScaleAction.HOLD, DecisionRule.BOUNDS)
    assert [hold.rule for hold in decision.held_by] == [HoldRule.CAPACITY]


def test_a_shrink_request_scales_down_ahead_of_the_cooldown_and_stabilisation() -> None:
    recent = (Recommendation(T0 - 60, 8),)
    grid = GridShare(job="a", holders=HOLDERS, shrink=_shrink(5))
    decision = decide(
        ScalePolicy(), BALANCED_8, now=T0, cooldown=RECENT_UP, recent=recent, grid=grid
    )
    assert (decision.action, decision.current_nodes, decision.target_nodes) == (
        ScaleAction.SCALE_DOWN,
        8,
        5,
    )
    assert decision.rule is DecisionRule.PREEMPTED
    assert decision.preempted_by == "urgent"
    assert decision.reason.startswith(
        "job 'urgent' (priority 5) needs nodes this job holds and asked it to shrink to 5; "
        "a preemption goes ahead of the cooldowns and the stabilisation window (in cooldown: "
    )
    assert "8 nodes were recommended within the last 600s" in decision.reason
    assert not decision.held_by
    assert _condition(decision, "ScalingActive")[:2] == (True, "ShrinkRequested")
    assert decision.recommended_nodes == 5


def test_a_shrink_request_never_goes_below_min_nodes() -> None:
    grid = GridShare(job="a", shrink=_shrink(2))
    decision = decide(ScalePolicy(min_nodes=6), BALANCED_8, now=T0, grid=grid)
    assert (decision.action, decision.target_nodes) == (ScaleAction.SCALE_DOWN, 6)
    assert "asked it to shrink to 2, no lower than the node floor of 6" in decision.reason
    assert _condition(decision, "ScalingLimited")[:2] == (True, "TooFewNodes")
    at_floor = decide(ScalePolicy(min_nodes=8), BALANCED_8, now=T0, grid=grid)
    assert (at_floor.action, at_floor.target_nodes, at_floor.rule) == (
        ScaleAction.HOLD,
        8,
        DecisionRule.PREEMPTED,
    )
    assert [hold.rule for hold in at_floor.held_by] == [HoldRule.FLOOR]
    assert at_floor.preempted_by == "urgent"


def test_a_shrink_request_needs_no_samples_and_one_at_or_above_the_size_is_no_preemption() -> None:
    one_sample = steady(8, count=1)
    decision = decide(ScalePolicy(), one_sample, now=T0, grid=GridShare(job="a", shrink=_shrink(4)))
    assert (decision.rule, decision.target_nodes) == (DecisionRule.PREEMPTED, 4)
    above = decide(ScalePolicy(), one_sample, now=T0, grid=GridShare(job="a", shrink=_shrink(8)))
    assert above.rule is DecisionRule.MIN_SAMPLES and above.preempted_by is None


def test_a_decision_on_a_shared_grid_replays_from_its_recorded_inputs() -> None:
    state = ScaleState(job_name="a").observe(QUEUED_8.samples, 8, T0)
    grid = GridShare(job="a", max_nodes=10, holders=HOLDERS)
    record = state.decide(ScalePolicy(), T0, grid=grid)
    assert record.decision.target_nodes == 10
    stored = type(record).model_validate(record.model_dump())
    assert stored.inputs.grid == grid
    assert stored.replay() == record.decision


def test_a_grid_share_of_the_wrong_type_is_one_sentence() -> None:
    with pytest.raises(ElasticGridError, match=r"^grid must be a GridShare, got 12$"):
        decide(ScalePolicy(), QUEUED_8, now=T0, grid=12)  # type: ignore[arg-type]


# -- the job's claim from a real ledger ---------------------------------------------------


def _holding(ledger: GridLedger, job: str, nodes: int, *, priority: int = 0, min_nodes: int = 0):
    launch = f"20261203T000000-{job}"
    ledger = reserve(
        ledger,
        job,
        {"local": nodes},
        launch_id=launch,
        now=T0,
        capacities=CAPACITIES,
        priority=priority,
        min_nodes=min_nodes,
    )
    return confirm(ledger, job, launch, now=T0)


def test_a_job_alone_on_the_grid_gets_no_share_and_decides_as_today() -> None:
    ledger = _holding(GridLedger(), "a", 8)
    assert grid_share(ledger, "a") is None
    shared = grid_share(_holding(ledger, "b", 4), "a")
    assert shared is not None and shared.holders == {"b": {"local": 4}}


def test_the_room_is_the_jobs_own_nodes_plus_its_share_by_gain() -> None:
    ledger = _holding(_holding(GridLedger(), "a", 8), "b", 10)  # 6 local + 8 cloud free
    wants = QueuedRequest("a", 30, 8, T0, current_nodes=8, remaining_s=3600.0)
    assert room_for(ledger, wants, CAPACITIES) == 8 + 14  # nobody else waits: all free
    rival = QueuedRequest("b", 30, 10, T0, priority=1, current_nodes=10, remaining_s=3600.0)
    assert room_for(enqueue(ledger, rival, now=T0), wants, CAPACITIES) == 8  # b goes first
    equal = QueuedRequest(
        "b", 15, 10, T0, current_nodes=10, remaining_s=3600.0, gain_per_node=2.0
    )  # same priority, twice the gain per node: its 5 first, the other 9 to a
    assert room_for(enqueue(ledger, equal, now=T0), wants, CAPACITIES) == 8 + 9


def test_the_claim_counts_the_measured_throughput_and_the_deadline() -> None:
    memory = CapacityMemory(sizes=(SizeMeasurement(4, 1.0, 0.0), SizeMeasurement(8, 0.75, 0.0)))
    decision = decide(ScalePolicy(startup_s=30), QUEUED_8, now=T0)
    request = job_request("a", decision, memory, ScalePolicy(startup_s=30), priority=2, now=T0)
    assert (request.nodes, request.current_nodes, request.min_nodes) == (
        decision.target_nodes,
        8,
        8,
    )
    assert request.gain_per_node == pytest.approx(0.5 / 0.75)  # the measured slope beyond 8
    assert (request.priority, request.restart_s, request.deadline_nodes) == (2, 30.0, 0)


def test_the_claim_says_when_the_job_ends_only_when_its_work_left_is_known() -> None:
    policy, memory = ScalePolicy(startup_s=30), CapacityMemory()
    batch = decide(
        policy, steady(8, step_s=2.0), now=T0, deadline_at=T0 + 7200, remaining_steps=600.0
    )
    finish = (batch.projection or {})["current_finish_s"]
    request = job_request("a", batch, memory, policy, priority=0, now=T0)
    assert request.ends_in_s == pytest.approx(finish) and request.as_claim().ends_in_s == finish
    stream = job_request("s", decide(policy, QUEUED_8, now=T0), memory, policy, priority=0, now=T0)
    assert stream.ends_in_s is None and stream.remaining_s == policy.horizon_s


def test_the_preemption_rule_sees_unrecorded_min_nodes_as_the_size() -> None:
    ledger = _holding(_holding(GridLedger(), "b", 6, min_nodes=2), "c", 4)
    claims = {claim.job: claim for claim in holder_claims(ledger, "a")}
    assert (claims["b"].min_nodes, claims["c"].min_nodes) == (2, 4)


def test_a_deadline_pressed_job_asks_only_lower_priority_jobs_to_shrink() -> None:
    ledger = _holding(GridLedger(), "low", 16, priority=0, min_nodes=12)
    ledger = _holding(ledger, "peer", 4, priority=3, min_nodes=1)
    ledger = _holding(ledger, "a", 4, priority=3, min_nodes=1)  # the grid is full
    policy = ScalePolicy(max_nodes=8)  # its deadline size (8) is reachable by shrinking 'low'
    window = steady(4, step_s=2.0)
    state = ScaleState(job_name="a").observe(window.samples, 4, T0)
    lines: list[tuple[int, str]] = []

    def decide_with(share):
        # 400 steps: 8 nodes meet the deadline (1000 would miss it at any size: hopeless,
        # and a hopeless job shrinks nobody)
        return state.decide(policy, T0, deadline_at=T0 + 600, remaining_steps=400, grid=share)

    grid = SharedGrid(ledger, {"local": 24}, priority=3)
    record, after = claim_the_grid("a", grid, state.capacity, policy, decide_with, T0, lines)
    assert record.decision.rule is DecisionRule.DEADLINE_PRESSURE
    assert record.decision.action is ScaleAction.HOLD
    assert [hold.rule for hold in record.decision.held_by] == [HoldRule.CAPACITY]
    assert [(s.job, s.to_nodes, s.by_job, s.by_priority) for s in after.shrinks] == [
        ("low", 13, "a", 3)  # for its deadline size (7) only; the equal-priority peer is spared
    ]
    assert [request.job for request in after.queue] == ["a"]
    assert any("asked lower-priority jobs to shrink: low 16 -> 13" in line for _, line in lines)
    (audited,) = after.rounds  # it started to queue: one audited round
    assert audited.by == "check of a" and audited.order[0] == "a"
    assert audited.tiers and audited.tiers["a"] == "deadline at risk"


def test_the_cli_prints_the_shared_grid_and_preempted_by_as_recorded() -> None:
    from elasticgrid_provider.cli.rendering import decision_lines

    grid = GridShare(job="a", max_nodes=8, holders=HOLDERS)
    held = "\n".join(decision_lines(decide(ScalePolicy(), QUEUED_8, now=T0, grid=grid)))
    assert "shared grid     room for 8 nodes; 'b' holds 20 on local; 'c' holds 4 on cloud" in held
    preempting = GridShare(job="a", shrink=_shrink(5))
    lines = "\n".join(decision_lines(decide(ScalePolicy(), BALANCED_8, now=T0, grid=preempting)))
    assert "preempted by    job 'urgent'" in lines
    assert "job 'urgent' (priority 5) asked it to shrink to 5" in lines
    alone = "\n".join(decision_lines(decide(ScalePolicy(), QUEUED_8, now=T0)))
    assert "shared grid" not in alone and "preempted by" not in alone


def _deadline_check(job: str, grid: SharedGrid, *, max_nodes: int, deadline_in_s: float,
                    steps: int) -> tuple[Any, GridLedger]:  # fmt: skip
    """One check of ``job`` on ``grid`` (4 nodes, 2 s a step, ``steps`` left, a deadline
    ``deadline_in_s`` away): its decision record and the ledger after it."""
    policy = ScalePolicy(max_nodes=max_nodes)
    state = ScaleState(job_name=job).observe(steady(4, step_s=2.0).samples, 4, T0)

    def decide_with(share):
        return state.decide(
            policy, T0, deadline_at=T0 + deadline_in_s, remaining_steps=steps, grid=share
        )

    return claim_the_grid(job, grid, state.capacity, policy, decide_with, T0, [])


def test_a_deadline_pressed_job_shrinks_nobody_when_its_deadline_size_stays_out_of_reach() -> None:
    # 'low' can give up 4 nodes (16 -> 12) but 'a' wants to grow to 24: shrinking 'low' would
    # cost it a restart and still leave 'a' behind its deadline, so nobody is asked
    ledger = _holding(GridLedger(), "low", 16, priority=0, min_nodes=12)
    ledger = _holding(ledger, "peer", 4, priority=3, min_nodes=1)
    ledger = _holding(ledger, "a", 4, priority=3, min_nodes=1)
    grid = SharedGrid(ledger, {"local": 24}, priority=3)
    record, after = _deadline_check("a", grid, max_nodes=24, deadline_in_s=600, steps=1000)
    assert record.decision.rule is DecisionRule.DEADLINE_PRESSURE
    assert [hold.rule for hold in record.decision.held_by] == [HoldRule.CAPACITY]
    assert after.shrinks == ()
    assert [request.job for request in after.queue] == ["a"]


def test_a_job_alone_on_the_grid_records_its_deadline_so_a_later_claim_spares_it() -> None:
    # 'due' holds 4 alone and is on track for its deadline only at 4 nodes: its standing is
    # in the ledger before anyone else comes, so a waiting launch of a higher priority (no
    # deadline) that could only fit by shrinking it shrinks nobody
    grid = SharedGrid(_holding(GridLedger(), "due", 4, min_nodes=1), {"local": 5}, priority=0)
    record, after = _deadline_check("due", grid, max_nodes=4, deadline_in_s=400, steps=150)
    assert record.decision.action is ScaleAction.HOLD
    (standing,) = after.standing
    assert (standing.job, standing.current_nodes, standing.deadline_nodes) == ("due", 4, 4)
    victims = holder_claims(after, "urgent")
    launch = accepting(
        JobClaim(job="urgent", nodes=0, wanted=3, min_nodes=3, priority=10), ShortfallMode.WAIT
    )
    plan = plan_preemption(launch, {"local": 1}, victims)
    assert (plan.shrinks, plan.granted) == ((), 0)
    # a check that changes nothing writes nothing: the same standing is not noted again
    later = SharedGrid(after, {"local": 5}, priority=0)
    again, unchanged = _deadline_check("due", later, max_nodes=4, deadline_in_s=400, steps=150)
    assert unchanged is after and again.decision.action is ScaleAction.HOLD
