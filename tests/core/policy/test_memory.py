"""The capacity memory and the scaling loss it fits (core/policy/memory.py)."""

from __future__ import annotations

import pytest

from elasticgrid_provider.core.policy.memory import CapacityMemory, SizeMeasurement
from tests.core.policy.windows import T0


def test_scaling_loss_is_the_prior_until_sizes_far_enough_apart_were_measured() -> None:
    at_8 = SizeMeasurement(8, 0.1, 0.0, 10)
    assert CapacityMemory((at_8,)).scaling("steps", 0.1) == (0.1, "prior")
    near = CapacityMemory((at_8, SizeMeasurement(9, 0.05, 0.0, 10)))
    assert near.scaling("steps", 0.1) == (0.1, "prior")  # 8 and 9 only fit noise
    # per-node rate 0.1 at 8, 0.08 at 16: 20% lost per doubling, trusted fully (a factor 2)
    memory = CapacityMemory((at_8, SizeMeasurement(16, 0.08, 0.0, 10)))
    loss, source = memory.scaling("steps", 0.1)
    assert loss == pytest.approx(0.2)
    assert source.startswith("measured at 8, 16 nodes")
    # extrapolated from the nearest measured size
    assert memory.per_node_rate("steps", 32, loss) == pytest.approx(0.08 * 0.8)
    assert memory.per_node_rate("steps", 4, loss) == pytest.approx(0.1 / 0.8)


def test_capacity_memory_round_trips_and_keeps_one_entry_per_size() -> None:
    memory = CapacityMemory((SizeMeasurement(8, 0.1, 5.0, 3, T0),))
    memory = memory.with_measurement(SizeMeasurement(8, 0.2, 6.0, 4, T0 + 1))
    memory = memory.with_measurement(SizeMeasurement(2, 0.3, 7.0, 4, T0 + 2))
    assert [entry.nodes for entry in memory.sizes] == [2, 8]
    assert memory.sizes[1].steps_per_node_s == 0.2
    assert CapacityMemory.model_validate(memory.model_dump()) == memory
    assert CapacityMemory.model_validate(None) == CapacityMemory()
