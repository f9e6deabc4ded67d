"""The controller: inputs checked once, stabilisation, cooldowns, the projection and
the invariants of every decision (core/policy/controller.py)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.policy.controller import decide
from elasticgrid_provider.core.policy.decision import (
    NO_COOLDOWN,
    CooldownClock,
    Recommendation,
    ScaleDecision,
)
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.policy.rules import ScaleAction
from elasticgrid_provider.core.samples import (
    LATEST_TIME,
    MAX_NODES,
    MAX_STEP,
    MAX_STEP_S,
    MAX_TOKENS,
    MIN_STEP_S,
    MIN_TOKENS,
    MetricsWindow,
    StepSample,
)
from tests.core.policy.windows import (
    BALANCED_8,
    FAST_4,
    IDLE_8,
    LINEAR,
    QUEUED_8,
    RECENT_UP,
    T0,
    closed_loop,
    steady,
    stream,
)


def test_a_change_starts_the_cooldown_and_a_hold_keeps_the_clock() -> None:
    scheduler = ScalePolicy()
    change = decide(scheduler, QUEUED_8, now=T0, cooldown=RECENT_UP)
    assert change.action is ScaleAction.HOLD
    assert change.cooldown is RECENT_UP
    change = decide(scheduler, QUEUED_8, now=T0)
    assert change.cooldown == CooldownClock(last_change_at=T0, last_action="scale_up")
    down = decide(scheduler, IDLE_8, now=T0 + 1)
    assert down.cooldown == CooldownClock(T0 + 1, "scale_down")
    bounds = decide(scheduler, QUEUED_8, now=T0 + 2, current_nodes=2000)
    assert bounds.cooldown == CooldownClock(T0 + 2, "scale_down")
    balanced = decide(scheduler, BALANCED_8, now=T0 + 3, cooldown=bounds.cooldown)
    assert balanced.cooldown == bounds.cooldown


def test_two_decisions_in_a_row_leave_the_cooldown_after_cooldown_s() -> None:
    """0.1.0 kept the clock in memory and defaulted ``now`` to 0: it never left cooldown."""
    scheduler = ScalePolicy(cooldown_s=300.0, max_nodes=64, **LINEAR)
    first = decide(scheduler, QUEUED_8, now=T0)
    assert (first.action, first.target_nodes) == (ScaleAction.SCALE_UP, 40)

    # A new process reads the stored clock back, as a scheduled check would.
    stored = json.loads(json.dumps(first.cooldown.model_dump()))
    fresh_scheduler = ScalePolicy.model_validate(json.loads(json.dumps(scheduler.model_dump())))
    busy_16 = steady(16, queue=0.8)
    second = decide(
        fresh_scheduler, busy_16, now=T0 + 60, cooldown=CooldownClock.model_validate(stored)
    )
    assert second.action is ScaleAction.HOLD
    assert [hold.rule for hold in second.held_by] == ["cooldown"]
    assert "last change 60s ago, scale-up cooldown is 300s" in second.reason
    assert second.cooldown == first.cooldown

    third = decide(fresh_scheduler, busy_16, now=T0 + 300, cooldown=second.cooldown)
    assert (third.action, third.target_nodes) == (ScaleAction.SCALE_UP, 64)  # 80, at the ceiling
    assert third.cooldown == CooldownClock(T0 + 300, "scale_up")


def test_separate_scale_down_cooldown_holds_down_but_not_up() -> None:
    scheduler = ScalePolicy(cooldown_s=300.0, scale_down_cooldown_s=900.0, max_nodes=16)
    assert scheduler.effective_scale_down_cooldown_s == 900.0
    clock = CooldownClock(T0 - 600, "scale_up")
    down = decide(scheduler, IDLE_8, now=T0, cooldown=clock)
    up = decide(scheduler, QUEUED_8, now=T0, cooldown=clock)
    assert (down.action, down.held_by[0].rule) == (ScaleAction.HOLD, "cooldown")
    assert (up.action, up.target_nodes) == (ScaleAction.SCALE_UP, 16)
    later = decide(scheduler, IDLE_8, now=T0 + 300, cooldown=clock)
    assert (later.action, later.target_nodes) == (ScaleAction.SCALE_DOWN, 4)


def test_scale_down_cooldown_defaults_to_cooldown_s() -> None:
    scheduler = ScalePolicy(cooldown_s=120.0)
    assert scheduler.scale_down_cooldown_s is None
    assert scheduler.effective_scale_down_cooldown_s == 120.0
    assert scheduler.thresholds()["scale_down_cooldown_s"] == 120.0
    assert scheduler.model_dump()["scale_down_cooldown_s"] is None


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"now": math.nan}, "now must be a finite number, got nan"),
        ({"now": None}, "now must be a number, got None"),
        ({"now": True}, "now must be a number, got True"),
        ({"deadline_at": math.inf}, "deadline_at must be a finite number, got inf"),
        ({"deadline_at": "tomorrow"}, "deadline_at must be a number, got 'tomorrow'"),
        ({"remaining_steps": -1}, "remaining_steps must be at least 0, got -1"),
        ({"remaining_steps": math.nan}, "remaining_steps must be a finite number, got nan"),
        ({"remaining_tokens": math.inf}, "remaining_tokens must be a finite number, got inf"),
        ({"current_nodes": 0}, "current_nodes must be at least 1, got 0"),
        ({"current_nodes": True}, "current_nodes must be a number, got True"),
        ({"current_nodes": 2.5}, "current_nodes must be a whole number, got 2.5"),
        ({"cooldown": {"last_change_at": 1.0}}, "cooldown must be a CooldownClock"),
    ],
)
def test_bad_decide_inputs_are_rejected(inputs: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {"now": T0, **inputs}
    with pytest.raises(ElasticGridError) as caught:
        decide(ScalePolicy(), QUEUED_8, **arguments)
    assert str(caught.value).startswith(message)


def test_decide_requires_a_window_and_an_explicit_now() -> None:
    with pytest.raises(ElasticGridError, match="window must be a MetricsWindow"):
        decide(ScalePolicy(), [StepSample(1, 1.0)], now=T0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        decide(ScalePolicy(), QUEUED_8)  # type: ignore[call-arg]


def test_nan_samples_never_reach_the_decision() -> None:
    """0.1.0 answered "balanced" for NaN durations (defect 4.6.6)."""
    with pytest.raises(ElasticGridError, match="sample duration_s must be a finite number"):
        QUEUED_8.add(StepSample(9, math.nan))
    with pytest.raises(
        ElasticGridError, match=r"window samples\.0\.queue_s must be a finite number"
    ):
        MetricsWindow.model_validate(
            {"samples": [{"step": 1, "duration_s": 1.0, "queue_s": math.inf}]}
        )


def test_remaining_work_too_large_to_project_is_rejected() -> None:
    with pytest.raises(ElasticGridError, match=r"remaining_steps .* is too large to project"):
        decide(
            ScalePolicy(),
            steady(4, step_s=MAX_STEP_S),
            now=T0,
            deadline_at=T0 + 10,
            remaining_steps=1e308,
        )


def test_decision_record_carries_the_projection() -> None:
    decision = decide(
        ScalePolicy(startup_s=60.0, **LINEAR),
        FAST_4,
        now=T0,
        deadline_at=T0 + 900,
        remaining_steps=600,
    )
    assert decision.deadline_at == T0 + 900
    assert decision.time_left_s == 900.0
    projection = decision.projection
    assert projection is not None
    # 0.125 steps per node-second: 600 steps take 4800/n s; 7 is the smallest size with
    # 60 + 4800/7 = 745.7 <= 0.9 * 900
    assert {name: projection[name] for name in _PROJECTED} == {
        "basis": "steps",
        "remaining": 600.0,
        "current_nodes": 4,
        "current_finish_s": 1200.0,
        "time_left_s": 900.0,
        "startup_s": 60.0,
        "target_nodes": 7,
        "target_finish_s": pytest.approx(60.0 + 4800.0 / 7),
        "meets_deadline": True,
        "restart_cost_node_s": 7 * 60.0,
        "capacity_per_s": 0.5,
        "demand_per_s": 0.5,
        "loop": "closed",
        "scaling_loss": 0.0,
    }
    assert decision.changed and decision.recommended_nodes == 7
    plain = decision.model_dump()
    assert plain["held_by"] == [] and plain["cooldown"]["last_change_at"] == T0
    no_deadline = decide(ScalePolicy(), FAST_4, now=T0, remaining_steps=600)
    assert no_deadline.time_left_s is None
    assert no_deadline.projection is not None and "meets_deadline" not in no_deadline.projection


_PROJECTED = (
    "basis",
    "remaining",
    "current_nodes",
    "current_finish_s",
    "time_left_s",
    "startup_s",
    "target_nodes",
    "target_finish_s",
    "meets_deadline",
    "restart_cost_node_s",
    "capacity_per_s",
    "demand_per_s",
    "loop",
    "scaling_loss",
)


def test_held_decision_lists_its_holds_in_the_record() -> None:
    decision = decide(ScalePolicy(), QUEUED_8, now=T0, cooldown=RECENT_UP)
    assert decision.model_dump()["held_by"] == [
        {
            "rule": "cooldown",
            "reason": "in cooldown: last change 120s ago, scale-up cooldown is 300s",
        }
    ]
    assert not decision.changed


seconds = st.one_of(st.just(0.0), st.floats(1e-3, 60.0), st.floats(60.0, 1e4))


@st.composite
def schedulers(draw: st.DrawFn) -> ScalePolicy:
    min_nodes = draw(st.integers(1, 64))
    return ScalePolicy(
        min_nodes=min_nodes,
        max_nodes=draw(st.integers(min_nodes, 2048)),
        scale_up_factor=draw(st.floats(1.001, 8.0)),
        scale_down_factor=draw(st.floats(0.01, 0.99)),
        cooldown_s=draw(st.floats(0, 1000)),
        scale_down_cooldown_s=draw(st.none() | st.floats(0, 2000)),
        target_queue_fraction=draw(st.floats(0, 1) | st.floats(0.1, 0.5)),
        idle_queue_fraction=draw(st.floats(0, 1) | st.floats(0, 0.1)),
        idle_step_fraction=draw(st.floats(0.01, 2.0)),
        target_step_s=draw(st.floats(0.1, 100.0)),
        min_samples=draw(st.integers(1, 5)),
        startup_s=draw(st.floats(0, 600)),
    )


@st.composite
def mixed_windows(draw: st.DrawFn, sizes: st.SearchStrategy[int]) -> MetricsWindow:
    """Up to 8 unrelated samples: any mix of sizes, step times, queueing and tokens."""
    count = draw(st.integers(0, 8))
    sample = st.builds(
        StepSample,
        step=st.integers(0, 10**6),
        duration_s=seconds,
        queue_s=st.one_of(st.just(0.0), seconds),
        nodes=sizes,
        tokens=st.one_of(st.just(0.0), st.floats(1.0, 1e6)),
    )
    samples = draw(st.lists(sample, min_size=count, max_size=count))
    return MetricsWindow(size=8, samples=tuple(samples))


@st.composite
def steady_windows(draw: st.DrawFn, sizes: st.SearchStrategy[int]) -> MetricsWindow:
    """Identical samples: reaches the idle and queue-bound rules far more often."""
    return steady(
        draw(sizes),
        step_s=draw(seconds),
        queue=draw(st.just(0.0) | st.floats(0, 1)),
        count=draw(st.integers(1, 8) | st.just(8)),
        tokens=draw(st.just(0.0) | st.floats(1.0, 1e6)),
    )


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[ScalePolicy, MetricsWindow, dict[str, Any]]:
    """A scheduler, a window and decide() inputs; sizes mostly within the bounds."""
    scheduler = draw(schedulers())
    out_of_bounds = draw(st.integers(0, 9)) == 0
    sizes = (
        st.integers(1, 4096)
        if out_of_bounds
        else st.integers(scheduler.min_nodes, scheduler.max_nodes)
    )
    window = draw(st.one_of(mixed_windows(sizes), steady_windows(sizes)))
    now = draw(st.floats(1e9, 2e9))
    last_change_ago = draw(st.none() | st.floats(-100, 3000))
    deadline_in = draw(st.none() | st.floats(-1000, 1e5))
    inputs = {
        "now": now,
        "current_nodes": draw(st.none() | sizes),
        "cooldown": NO_COOLDOWN
        if last_change_ago is None
        else CooldownClock(
            now - last_change_ago, draw(st.sampled_from(["scale_up", "scale_down"]))
        ),
        "deadline_at": None if deadline_in is None else now + deadline_in,
        "remaining_steps": draw(st.none() | st.floats(0, 1e5)),
        "remaining_tokens": draw(st.none() | st.floats(0, 1e8)),
    }
    return scheduler, window, inputs


@settings(max_examples=500, deadline=None)
@given(scenario=scenarios())
def test_decision_invariants(
    scenario: tuple[ScalePolicy, MetricsWindow, dict[str, Any]],
) -> None:
    scheduler, window, inputs = scenario
    decision = decide(scheduler, window, **inputs)
    current, target = decision.current_nodes, decision.target_nodes
    if decision.action is ScaleAction.SCALE_UP:
        assert target > current
    elif decision.action is ScaleAction.SCALE_DOWN:
        assert target < current
    else:
        assert target == current
    # Always within the bounds, except a min_samples hold at a size it cannot judge yet.
    if decision.rule != "min_samples":
        assert scheduler.min_nodes <= target <= scheduler.max_nodes
    if scheduler.min_nodes <= current <= scheduler.max_nodes:
        assert scheduler.min_nodes <= target <= scheduler.max_nodes
    if decision.held_by:
        assert decision.action is ScaleAction.HOLD
    if decision.changed:
        assert decision.cooldown == CooldownClock(inputs["now"], decision.action.value)
    else:
        assert decision.cooldown == inputs["cooldown"]
    assert ScaleDecision.model_validate_json(decision.model_dump_json()) == decision
    assert decide(scheduler, window, **inputs) == decision


def test_an_unbounded_demand_is_recorded_as_none_not_the_float_maximum():
    # the queue fills every step: the closed-loop demand has no bound
    window = MetricsWindow(samples=tuple(StepSample(i, 10.0, 10.0, 4) for i in range(4)))
    decision = decide(
        ScalePolicy(max_nodes=8, min_samples=3),
        window,
        now=1e9,
        deadline_at=1e9 + 600,
        remaining_steps=100,
    )
    projection = decision.projection or {}
    assert projection["demand_per_s"] is None
    assert projection["utilisation"] is None
    assert projection["current_finish_s"] == 1000.0
    text = json.dumps(decision.model_dump(), allow_nan=False)
    assert "e+308" not in text


def _extreme(low: float, high: float) -> st.SearchStrategy[float]:
    """A bound itself, or anything between: the corners are where arithmetic overflows."""
    return st.sampled_from([low, high]) | st.floats(low, high)


extreme_samples = st.builds(
    StepSample,
    step=st.integers(0, MAX_STEP),
    duration_s=st.just(0.0) | _extreme(MIN_STEP_S, MAX_STEP_S),
    queue_s=_extreme(0.0, MAX_STEP_S),
    nodes=st.sampled_from([1, MAX_NODES]) | st.integers(1, MAX_NODES),
    tokens=st.just(0.0) | _extreme(MIN_TOKENS, MAX_TOKENS),
    time=st.none() | _extreme(0.0, LATEST_TIME),
)


@settings(max_examples=400, deadline=None)
@given(samples=st.lists(extreme_samples, max_size=12), now=_extreme(0.0, LATEST_TIME))
def test_every_sample_within_the_bounds_is_decided_on_without_an_arithmetic_error(
    samples: list[StepSample], now: float
) -> None:
    # every sample field is bounded so that no decision can overflow: 1e300 step times and
    # 1e308 durations raised OverflowError in _arrival_spread before the bounds existed
    window = MetricsWindow(size=12, samples=tuple(samples))
    current = samples[-1].nodes if samples else 1
    scheduler = ScalePolicy(min_samples=1, max_nodes=MAX_NODES)
    for deadline in (None, now + 3600.0):
        try:
            decision = decide(
                scheduler,
                window,
                now=now,
                current_nodes=current,
                deadline_at=deadline,
                remaining_steps=1e4,
            )
        except ElasticGridError as error:  # a clear sentence is fine, never an arithmetic error
            assert "too large" in str(error), error
            continue
        assert 1 <= decision.target_nodes <= MAX_NODES
        assert ScaleDecision.model_validate_json(decision.model_dump_json()) == decision


def test_a_scale_down_acts_on_the_largest_recent_recommendation() -> None:
    window = closed_loop(8, 5.0)  # idle: 5 s steps against a 30 s target
    scheduler = ScalePolicy()
    alone = decide(scheduler, window, now=T0)
    assert (alone.action, alone.target_nodes) == (ScaleAction.SCALE_DOWN, 4)
    old = decide(scheduler, window, now=T0, recent=(Recommendation(T0 - 900, 8),))
    assert (old.action, old.target_nodes) == (ScaleAction.SCALE_DOWN, 4)  # outside 600 s
    wanted_more = decide(scheduler, window, now=T0, recent=(Recommendation(T0 - 60, 8),))
    assert wanted_more.action is ScaleAction.HOLD
    assert [hold.rule for hold in wanted_more.held_by] == ["stabilisation"]
    assert wanted_more.recommended_nodes == 4
    # 4 now, 6 five minutes ago: still falling, so wait rather than shrink twice
    falling = decide(scheduler, window, now=T0, recent=(Recommendation(T0 - 300, 6),))
    assert falling.action is ScaleAction.HOLD
    assert "the recommendations are still falling: 4 nodes now, 6 within" in falling.reason


def test_a_change_within_the_tolerance_is_not_made() -> None:
    # 1000 tokens every 10 s (100/s) on a capacity of 125/s: 100 * 1.2 is within 10% of it
    window = stream(5, every_s=10, service_s=8, queues=[0.0] * 6)
    decision = decide(ScalePolicy(), window, now=T0)
    assert (decision.action, decision.rule) == (ScaleAction.HOLD, "demand")
    assert "it fits" in decision.reason or "tolerance" in decision.reason


def test_a_growing_backlog_scales_up_once_confirmed() -> None:
    # arrivals every 5 s, service 8 s: the wait grows 3 s per batch
    window = stream(2, every_s=5, service_s=8, queues=[0, 3, 6, 9, 12, 15])
    scheduler = ScalePolicy(scaling_loss=0.0)
    first = decide(scheduler, window, now=T0)
    assert first.action is ScaleAction.HOLD
    assert [hold.rule for hold in first.held_by] == ["stabilisation"]
    assert first.recommended_nodes is not None and first.recommended_nodes > 2
    confirmed = decide(
        scheduler, window, now=T0 + 60, recent=(Recommendation(T0, first.recommended_nodes),)
    )
    assert confirmed.action is ScaleAction.SCALE_UP
    # demand 200 tokens/s against 125 at 2 nodes: at least 1.2 * 200 = 240, i.e. 4 nodes
    assert confirmed.target_nodes >= 4
    assert "grows" in confirmed.reason


def test_separate_cooldowns_still_hold() -> None:
    scheduler = ScalePolicy(cooldown_s=60.0, scale_down_cooldown_s=600.0)
    clock = CooldownClock(T0 - 120, "scale_up")
    down = decide(scheduler, closed_loop(8, 5.0), now=T0, cooldown=clock)
    up = decide(scheduler, closed_loop(2, 0.4, 0.2), now=T0, cooldown=clock)
    assert [hold.rule for hold in down.held_by] == ["cooldown"]
    assert up.action is ScaleAction.SCALE_UP


def test_projections_are_finite_json() -> None:
    decision = decide(
        ScalePolicy(), stream(2, every_s=1, service_s=8, queues=[0, 7, 14, 21]), now=T0
    )
    assert decision.projection is not None
    for value in decision.projection.values():
        assert not (isinstance(value, float) and not math.isfinite(value))
    assert decision.model_dump_json()


def test_a_queue_whose_growth_still_speeds_up_does_not_confirm_a_scale_up() -> None:
    """The trend of a load that just rose mixes steps from before and after the rise."""
    scheduler = ScalePolicy(scaling_loss=0.0)
    confirmed_before = (Recommendation(T0 - 60, 8),)
    # the wait grew 1 s over the older pair of steps, 8 s over the newest: half-measured
    speeding = stream(2, every_s=5, service_s=8, queues=[0, 0, 0, 1, 2, 10])
    held = decide(scheduler, speeding, now=T0 + 60, recent=confirmed_before)
    assert held.action is ScaleAction.HOLD
    assert [hold.rule for hold in held.held_by] == ["stabilisation"]
    assert "the queue's growth is still speeding up" in held.reason
    # the same check agreeing with the last one confirms a queue that grows steadily
    steady = stream(2, every_s=5, service_s=8, queues=[0, 3, 6, 9, 12, 15])
    grown = decide(scheduler, steady, now=T0 + 60, recent=confirmed_before)
    assert grown.action is ScaleAction.SCALE_UP
