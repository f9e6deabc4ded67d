"""A stream's sizing: the capacity it needs (its demand's recent peak plus the band), what
its record says about it, and the restart trade-off of a resize (``docs/policy.md``,
Streams). :func:`~elasticgrid_provider.core.policy.calculator.demand_rule` applies them.

Pure: no Airflow, no I/O.
"""

from __future__ import annotations

from typing import Any

from elasticgrid_provider.core.policy.load import LoadEstimate
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.policy.rules import WorkBasis
from elasticgrid_provider.core.policy.situation import Situation
from elasticgrid_provider.core.policy.throughput import (
    projected_capacity,
    restart_price_node_s,
    scaling,
    serving_size,
)

ARRIVAL_SPREAD_DEVIATIONS = 2.0
"""An open loop with a deadline widens its band to cover the arrival rate two standard
deviations above its mean."""


def stream_need(
    policy: ScalePolicy, situation: Situation, load: LoadEstimate
) -> tuple[float, float]:
    """The capacity a stream needs and the band above its peak: the recent peak plus
    ``stream_band`` (wider, up to ``headroom``, for irregular arrivals: two standard
    deviations), and no less than the level plus a restart's arrivals drained in ``drain_s``."""
    demand = situation.demand
    band = policy.stream_band
    if demand is None:  # an open loop with a deadline: its level is the measured demand
        spread = ARRIVAL_SPREAD_DEVIATIONS * situation.arrival_spread
        band = min(max(policy.headroom, band), max(band, spread))
        peak = level = load.demand_per_s
    else:
        peak, level = demand.peak_per_s, demand.rate_per_s
    return max(peak * (1.0 + band), level * (1.0 + policy.startup_s / policy.drain_s)), band


def stream_numbers(
    policy: ScalePolicy, situation: Situation, basis: WorkBasis, need: float
) -> dict[str, Any]:
    """What a stream's record says about its sizing: the demand level and peak, the covering
    size and its capacity, the restart trade-off of moving there, the prior counted on."""
    demand, current = situation.demand, situation.current
    if demand is None:
        return {}
    covering = serving_size(policy, situation, basis, need)
    saving, price, steady_s = restart_tradeoff(policy, situation, covering)
    loss, source = scaling(policy, situation, basis)
    return {
        "demand_rate_per_s": demand.rate_per_s,
        "demand_peak_per_s": demand.peak_per_s,
        "peak_window_s": demand.window_s,
        "covering_nodes": covering,
        "covering_capacity_per_s": projected_capacity(policy, situation, basis, covering),
        "steady_s": steady_s,
        "saving_node_s": saving if covering < current else None,
        "restart_price_node_s": price if covering != current else 0.0,
        "stabilisation_window_s": policy.stream_window_s,
        "prior_scaling_loss": loss,
        "prior_source": source,
    }


def restart_tradeoff(
    policy: ScalePolicy, situation: Situation, target: int
) -> tuple[float, float, float]:
    """A stream's resize to ``target``: the node-seconds it saves until the next expected
    change, the restart price, and that expected steady time (``horizon_s`` shortened by the
    demand's variability: a peak far above the level means the level will not hold long)."""
    demand = situation.demand
    variability = 0.0 if demand is None else demand.variability
    steady_s = max(policy.horizon_s * (1.0 - variability), policy.startup_s)
    saving = (situation.current - target) * max(steady_s - policy.startup_s, 0.0)
    return saving, restart_price_node_s(policy, situation.current, target), steady_s
