"""The throughput model the sizing rules share: projected capacity at a size, the scaling
loss counted on (a stream's calibrated prior), finish times and the restart price.

Pure: no Airflow, no I/O.
"""

from __future__ import annotations

import sys

from elasticgrid_provider.core.monotone import smallest_satisfying
from elasticgrid_provider.core.policy.holds import is_stream
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.policy.rules import WorkBasis
from elasticgrid_provider.core.policy.situation import RemainingWork, Situation


def projected_capacity(
    policy: ScalePolicy,
    situation: Situation,
    basis: WorkBasis,
    nodes: int,
    *,
    worst_case: bool = False,
) -> float:
    """Projected throughput of the whole job at ``nodes`` (work per second). ``worst_case``:
    below the one size a job was measured at, no per-node gain at all (linear scaling, the
    slowest a smaller size runs), as nothing measured confirms the prior's."""
    loss, _ = scaling(policy, situation, basis)
    measured = [size for size, _ in situation.memory.measured(basis)]
    if measured and nodes < min(measured):
        # below every measured size, a shrink counts on no more than fit or prior promise
        loss = min(loss, policy.scaling_loss)
        if worst_case and len(measured) < 2:
            loss = 0.0
    return nodes * situation.memory.per_node_rate(basis, nodes, loss)


def scaling(policy: ScalePolicy, situation: Situation, basis: WorkBasis) -> tuple[float, str]:
    """The per-doubling loss the sizing counts on and its source: a stream's calibrated prior
    (:meth:`~elasticgrid_provider.core.policy.memory.CapacityMemory.calibrated_scaling`), any
    other job's fit blended with ``scaling_loss``."""
    if is_stream(situation):
        return situation.memory.calibrated_scaling(basis, policy.scaling_loss)
    return situation.memory.scaling(basis, policy.scaling_loss)


def finish_s(
    policy: ScalePolicy,
    situation: Situation,
    work: RemainingWork,
    nodes: int,
    *,
    worst_case: bool = False,
) -> float:
    """Seconds ``work`` takes at ``nodes`` (no restart); capped to stay finite. ``worst_case``:
    as :func:`projected_capacity` says."""
    capacity = projected_capacity(policy, situation, work.basis, nodes, worst_case=worst_case)
    if capacity <= 0:
        return sys.float_info.max
    return min(work.amount / capacity, sys.float_info.max)


def restart_price_node_s(policy: ScalePolicy, current: int, target: int) -> float:
    return max(current, target) * policy.startup_s


def serving_size(policy: ScalePolicy, situation: Situation, basis: WorkBasis, need: float) -> int:
    """The smallest size whose projected capacity covers ``need`` (else ``max_nodes``)."""
    target = smallest_satisfying(
        lambda nodes: projected_capacity(policy, situation, basis, nodes) >= need,
        policy.min_nodes,
        policy.max_nodes,
    )
    return policy.max_nodes if target is None else target
