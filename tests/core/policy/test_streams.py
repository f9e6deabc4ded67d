"""A stream's rules: its demand model, its stabilisation window, the restart trade-off and the
calibrated prior (each test can fail on the rule it names)."""

from __future__ import annotations

import math

import pytest

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.policy.controller import decide
from elasticgrid_provider.core.policy.decision import Recommendation
from elasticgrid_provider.core.policy.load import estimate_load, stream_demand
from elasticgrid_provider.core.policy.memory import (
    PESSIMISM,
    CapacityMemory,
    SizeMeasurement,
)
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.policy.rules import HoldRule, ScaleAction, WorkBasis
from elasticgrid_provider.core.samples import MetricsWindow, StepSample
from elasticgrid_provider.core.state import ScaleState
from tests.benchmarks import load_bench_policy
from tests.core.policy.windows import T0, stream

TOKENS = 1000.0


def served(arrivals: list[float], service_s: float, nodes: int = 1, steps=None) -> MetricsWindow:
    """Batches of ``TOKENS`` arriving at ``arrivals``, served first in first out in
    ``service_s`` each; ``steps``: their step numbers (default 0, 1, ...)."""
    samples, free_at = [], -math.inf
    for index, arrived in enumerate(arrivals):
        start = max(arrived, free_at)
        free_at = start + service_s
        step = index if steps is None else steps[index]
        samples.append(StepSample(step, free_at - arrived, start - arrived, nodes, TOKENS, free_at))
    return MetricsWindow(samples=tuple(samples))


def demand_of(window: MetricsWindow, nodes: int = 1, window_s: float = 120.0):
    load = estimate_load(window.samples, nodes, arrivals=True)
    assert load is not None and load.open_loop
    return stream_demand(window.samples, load, window_s)


def every(gap_s: float, count: int, start: float = T0) -> list[float]:
    return [start + gap_s * index for index in range(count)]


# -- the demand model ---------------------------------------------------------------------


def test_a_steady_stream_has_its_rate_as_level_and_peak() -> None:
    demand = demand_of(served(every(10.0, 10), service_s=2.0))
    assert demand.rate_per_s == pytest.approx(100.0)  # 1000 tokens every 10 s
    assert demand.peak_per_s == pytest.approx(100.0)
    assert demand.variability == pytest.approx(0.0)


def test_a_ramp_reads_its_newest_rate_as_the_peak() -> None:
    # gaps shrinking 20 s -> 4 s: the newest 60 s arrive far faster than the whole window
    gaps = [20.0, 18.0, 16.0, 14.0, 12.0, 10.0, 8.0, 6.0, 5.0, 4.0]
    arrivals = [T0 + sum(gaps[:index]) for index in range(len(gaps) + 1)]
    demand = demand_of(served(arrivals, service_s=1.0), window_s=20.0)
    assert demand.peak_per_s >= TOKENS / 5.0  # at least the 5 s gaps' rate
    assert demand.peak_per_s > 1.5 * demand.rate_per_s


def test_a_spike_raises_the_peak_not_the_level() -> None:
    # steady 10 s gaps, then three batches 1 s apart
    arrivals = [*every(10.0, 8), T0 + 71.0, T0 + 72.0, T0 + 73.0]
    demand = demand_of(served(arrivals, service_s=0.5), window_s=5.0)
    assert demand.peak_per_s == pytest.approx(TOKENS / 1.0)
    assert demand.rate_per_s < 0.5 * demand.peak_per_s
    assert demand.variability > 0.5


def test_a_drop_reads_the_new_level_once_it_is_measured() -> None:
    # 5 s gaps, then 20 s gaps: half-measured, the level sits between the two rates (the
    # scale-down waits: the load is still falling); once the window holds only the new
    # rate, level and peak are the new rate, with no stale peak left
    half = demand_of(served([*every(5.0, 5), *every(20.0, 5, start=T0 + 40.0)], 1.0))
    assert TOKENS / 20.0 < half.rate_per_s < TOKENS / 5.0
    arrivals = [*every(5.0, 8), *every(20.0, 11, start=T0 + 55.0)]
    demand = demand_of(served(arrivals, service_s=1.0))
    assert demand.rate_per_s == pytest.approx(TOKENS / 20.0)
    assert demand.peak_per_s == pytest.approx(TOKENS / 20.0)


def test_noisy_arrivals_keep_the_level_at_the_mean_rate() -> None:
    jitter = [0.0, 1.5, -1.0, 2.0, -2.0, 0.5, -1.5, 1.0, -0.5, 0.0]
    arrivals = [T0 + 10.0 * index + wobble for index, wobble in enumerate(jitter)]
    demand = demand_of(served(arrivals, service_s=1.0), window_s=30.0)
    assert demand.rate_per_s == pytest.approx(100.0, rel=0.02)
    assert 100.0 <= demand.peak_per_s <= 130.0


def test_a_gap_in_the_step_log_is_not_read_as_a_fall() -> None:
    # steps 5..9 are missing from the log: the work still arrived every 10 s
    steps = [0, 1, 2, 3, 4, 10, 11, 12, 13, 14]
    arrivals = [T0 + 10.0 * step for step in steps]
    demand = demand_of(served(arrivals, service_s=1.0, steps=steps))
    assert demand.rate_per_s == pytest.approx(100.0)


def test_a_nan_sample_is_refused_with_its_field_named() -> None:
    with pytest.raises(ElasticGridError, match="duration_s"):
        StepSample(1, math.nan, 0.0, 1, TOKENS, T0)


# -- the stabilisation window -------------------------------------------------------------


def stream_policy(**fields) -> ScalePolicy:
    return ScalePolicy(scaling_loss=0.0, startup_s=60.0, cooldown_s=0.0, **fields)


def test_a_streams_window_comes_from_its_restart_price() -> None:
    policy = stream_policy()
    assert policy.stream_window_s == pytest.approx(policy.stream_window_restarts * 60.0)
    assert ScalePolicy(startup_s=1e4).stream_window_s == ScalePolicy().scale_down_window_s


def test_a_drop_shrinks_once_the_window_has_passed() -> None:
    # 100 tokens/s on 10 nodes that serve 380/s: 3 nodes cover it
    window = stream(10, every_s=10, service_s=1000 / 380, queues=[0.0] * 6)
    policy = stream_policy()
    inside = (Recommendation(T0 - policy.stream_window_s / 2, 10),)
    held = decide(policy, window, now=T0, recent=inside)
    assert held.action is ScaleAction.HOLD
    assert [hold.rule for hold in held.held_by] == [HoldRule.STABILISATION]
    assert "10 nodes were recommended within the last 180s" in held.reason
    # a batch job's flat 600 s window would still hold; the stream's has passed
    before = (Recommendation(T0 - policy.stream_window_s - 1.0, 10),)
    shrunk = decide(policy, window, now=T0, recent=before)
    assert (shrunk.action, shrunk.target_nodes) == (ScaleAction.SCALE_DOWN, 3)
    assert policy.stream_window_s + 1.0 < policy.scale_down_window_s


def test_a_spike_within_the_window_does_not_flap() -> None:
    # the last checks recommended 3, 9 (a spike) and 3: the highest in the window holds 9
    window = stream(9, every_s=10, service_s=1000 / 342, queues=[0.0] * 6)
    policy = stream_policy()
    recent = (
        Recommendation(T0 - 120.0, 3),
        Recommendation(T0 - 60.0, 9),
    )
    decision = decide(policy, window, now=T0, recent=recent)
    assert decision.action is ScaleAction.HOLD
    assert "9 nodes were recommended within the last" in decision.reason


def test_the_final_stretch_holds_only_jobs_with_work_left() -> None:
    window = stream(10, every_s=10, service_s=1000 / 380, queues=[0.0] * 6)
    policy = stream_policy(final_stretch_s=10_000.0)
    # a stream with a deadline but no remaining work: not in a final stretch
    decision = decide(policy, window, now=T0, deadline_at=T0 + 100.0)
    assert HoldRule.FINAL_STRETCH not in [hold.rule for hold in decision.held_by]
    assert decision.action is ScaleAction.SCALE_DOWN


def test_a_drop_still_settling_waits_to_shrink_once() -> None:
    # gaps of 4.5 s then 5 s (too close for a rate change): all the arrivals read 213/s, 6
    # nodes of 43/s; the newer half alone 204/s, which 5 cover: one shrink, later, to 5
    policy = stream_policy()
    arrivals = [*every(4.5, 7), *every(5.0, 4, start=T0 + 32.0)]
    mixed = served(arrivals, service_s=1000 / 430, nodes=10)
    held = decide(policy, mixed, now=arrivals[-1] + 10.0)
    assert held.action is ScaleAction.HOLD
    assert [hold.rule for hold in held.held_by] == [HoldRule.STABILISATION]
    assert "the rate is still settling" in held.reason and "which 5 nodes cover" in held.reason
    settled = served(every(5.0, 10), service_s=1000 / 430, nodes=10)
    shrunk = decide(policy, settled, now=T0 + 55.0)
    assert (shrunk.action, shrunk.target_nodes) == (ScaleAction.SCALE_DOWN, 5)


# -- the restart trade-off ----------------------------------------------------------------


def test_a_small_saving_does_not_pay_for_the_restart() -> None:
    # 4 nodes serve 152/s (38 each); 100/s needs 3: saving 1 node until the next change
    window = stream(4, every_s=10, service_s=1000 / 152, queues=[0.0] * 6)
    cheap = decide(stream_policy(horizon_s=3600.0), window, now=T0)
    assert (cheap.action, cheap.target_nodes) == (ScaleAction.SCALE_DOWN, 3)
    projection = cheap.projection
    assert projection is not None
    # 1 node x (3600 - 60) s saved against 4 nodes x 60 s of restart
    assert projection["saving_node_s"] == pytest.approx(3540.0)
    assert projection["restart_price_node_s"] == pytest.approx(240.0)
    # the same shrink when the next change is expected in 300 s: 240 saved, 2 x 240 needed
    dear = decide(stream_policy(horizon_s=300.0), window, now=T0)
    assert dear.action is ScaleAction.HOLD
    assert [hold.rule for hold in dear.held_by] == [HoldRule.RESTART_COST]
    assert "until the next expected change" in dear.reason
    assert dear.projection is not None and dear.projection["saving_node_s"] == pytest.approx(240.0)


# -- the calibrated prior -----------------------------------------------------------------


def test_an_unmeasured_job_counts_on_the_pessimistic_default() -> None:
    memory = CapacityMemory(sizes=(SizeMeasurement(2, 0.0, 50.0, 5),))
    loss, source = memory.calibrated_scaling(WorkBasis.TOKENS, 0.1)
    assert loss == pytest.approx(PESSIMISM * 0.1) and loss > 0.1
    assert source.startswith("pessimistic default")


def test_two_measured_sizes_teach_the_prior() -> None:
    # 50 tokens/s per node at 2 nodes, 45 at 4: 10% lost per doubling, learnt
    memory = CapacityMemory(
        sizes=(SizeMeasurement(2, 0.0, 50.0, 5), SizeMeasurement(4, 0.0, 45.0, 5))
    )
    loss, source = memory.calibrated_scaling(WorkBasis.TOKENS, 0.3)
    assert loss == pytest.approx(0.1)  # the fit over a factor of 2 replaces the default
    loss, source = memory.calibrated_scaling(WorkBasis.TOKENS, 0.0)
    assert loss == pytest.approx(0.1)  # the fit, above a too-hopeful prior
    # sizes 20% apart blend with the prior; the larger of fit and blend counts
    close = CapacityMemory(
        sizes=(SizeMeasurement(10, 0.0, 50.0, 5), SizeMeasurement(12, 0.0, 50.0, 5))
    )
    assert close.calibrated_scaling(WorkBasis.TOKENS, 0.2)[0] > 0.0
    assert source == "learnt from this job's sizes 2, 4"


def test_the_first_scale_up_records_which_prior_it_used() -> None:
    # 2 nodes serve 100/s; 300/s arrive with a growing queue
    window = stream(2, every_s=10 / 3, service_s=20.0, queues=[0, 5, 10, 15, 20, 25])
    decision = decide(
        ScalePolicy(startup_s=60.0), window, now=T0, recent=(Recommendation(T0 - 60, 9),)
    )
    projection = decision.projection
    assert projection is not None
    assert projection["prior_source"].startswith("pessimistic default")
    assert projection["prior_scaling_loss"] == pytest.approx(PESSIMISM * 0.1)
    assert decision.recommended_nodes is not None and decision.recommended_nodes > 2


def test_a_stream_grows_when_its_rate_rises_and_shrinks_after_it_falls_each_step_explained():
    """Through the sensor's transition (:meth:`ScaleState.advance`), checked every 60 s."""
    bench = load_bench_policy()
    # 1 node serves 1800 tokens/s; the load runs 1500/s, then 6000/s, then 1500/s again
    job = bench.StreamJob(
        segments=((1800.0, 1500.0), (3600.0, 6000.0), (3600.0, 1500.0)),
        node_rate=1800.0,
        beta=0.05,
        batch_tokens=30_000.0,
        launch_nodes=1,
        startup_s=60.0,
    )
    policy = bench.scheduler_for(job.startup_s)
    state = ScaleState(job_name="stream")
    resizes = []

    def decide(samples, nodes, now):
        nonlocal state
        state, record = state.advance(policy, samples, nodes, now, window_size=10)
        decision = record.decision
        if decision.target_nodes != nodes:
            resizes.append(decision)
        return decision.target_nodes

    outcome = bench.run_stream(job, decide, latency_s=policy.drain_s)
    _, optimum_changes = bench.stream_plan(job)
    assert outcome.met_goal
    sizes = outcome.sizes
    assert sizes[0] == 1 and max(sizes) >= 4 and sizes[-1] < max(sizes), sizes
    assert len(resizes) <= optimum_changes + 1, sizes
    for decision in resizes:
        covered = [c for c in decision.conditions if c.type == "DemandCovered"]
        assert len(covered) == 1, decision.reason
        projection = decision.projection or {}
        assert projection["covering_nodes"] >= 1
        assert projection["restart_price_node_s"] > 0
        if decision.action is ScaleAction.SCALE_DOWN:
            assert projection["saving_node_s"] >= 2 * projection["restart_price_node_s"]
            assert "restart trade-off" in covered[0].message
