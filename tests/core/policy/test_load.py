"""Load estimation: demand, capacity and backlog from a window (core/policy/load.py)."""

from __future__ import annotations

import pytest

from elasticgrid_provider.core.policy.load import estimate_load, since_rate_change
from elasticgrid_provider.core.samples import (
    StepSample,
)
from tests.core.policy.windows import T0, closed_loop, stream


def test_closed_loop_demand_is_the_capacity_over_the_unqueued_share() -> None:
    load = estimate_load(closed_loop(2, 0.4, 0.2).samples, 2)
    assert load is not None and not load.open_loop
    assert load.capacity_per_s == pytest.approx(1 / 0.4)  # one step per 0.4 s
    assert load.demand_per_s == pytest.approx(2 / 0.4)  # half the step waited: twice that
    assert load.steps_per_node_s == pytest.approx(1 / 0.8)


def test_an_idle_stream_measures_its_arrival_rate_and_utilisation() -> None:
    # 1000 tokens every 10 s, served in 4 s: demand 100 tokens/s, capacity 250 tokens/s
    load = estimate_load(stream(5, every_s=10, service_s=4, queues=[0.0] * 5).samples, 5)
    assert load is not None and load.open_loop
    assert load.demand_per_s == pytest.approx(100.0)
    assert load.capacity_per_s == pytest.approx(250.0)
    assert load.utilisation == pytest.approx(0.4)
    assert load.backlog_s == 0.0 and load.drain_s == 0.0
    assert load.tokens_per_node_s == pytest.approx(50.0)


def test_a_draining_backlog_reads_as_draining_not_as_demand() -> None:
    # after a restart: arrivals every 10 s, service 5 s, waits falling 5 s per batch
    load = estimate_load(stream(4, every_s=10, service_s=5, queues=[40, 35, 30, 25, 20]).samples, 4)
    assert load is not None and load.open_loop
    assert load.demand_per_s == pytest.approx(100.0)  # the arrivals, not the queue level
    assert load.capacity_per_s == pytest.approx(200.0)
    assert load.backlog_trend < 0
    assert load.backlog_s == pytest.approx(20 * 0.5)  # the work that arrived while it waited
    assert load.drain_s == pytest.approx(20.0)


def test_samples_without_times_are_a_closed_loop() -> None:
    samples = [StepSample(i, 10.0, 0.0, 4, 100.0) for i in range(4)]
    load = estimate_load(samples, 4)
    assert load is not None and not load.open_loop
    assert estimate_load([], 4) is None


def test_a_fallen_arrival_rate_is_read_from_the_arrivals_since_it_fell() -> None:
    # 1000 tokens every 10 s, then every 100 s: the older arrivals measured a load that ended
    arrivals = [T0 + 10.0 * i for i in range(6)] + [T0 + 50.0 + 100.0 * i for i in range(1, 6)]
    samples = [StepSample(i, 2.0, 0.0, 5, 1000.0, at + 2.0) for i, at in enumerate(arrivals)]
    assert since_rate_change(samples, "tokens") == samples[5:]
    load = estimate_load(samples, 5, arrivals=True)
    assert load is not None and load.open_loop
    assert load.demand_per_s == pytest.approx(10.0)  # not the 25/s the whole window averages
    assert not load.falling
    # a steady stream, or one whose change a few gaps cannot yet show, is read whole
    steady = samples[:6]
    assert since_rate_change(steady, "tokens") == steady
    assert since_rate_change(samples[:8], "tokens") == samples[:8]
