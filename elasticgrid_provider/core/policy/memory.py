"""The capacity memory: per-node throughput the job measured at each size it ran at.

Other sizes extrapolate from the nearest measured one, losing a share per doubling of the
node count: fitted (least squares of log throughput on log2 nodes, in [0, 0.5]) from sizes
at least 20% apart, blended with the prior ``scaling_loss`` until they span a factor of 2.
The memory is kept across resizes, one entry per size (``docs/policy.md``).

Pure: no Airflow, no I/O.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import field_validator

from elasticgrid_provider.core.policy.rules import WorkBasis
from elasticgrid_provider.core.records import Extras, ForwardCompatible, extras_field
from elasticgrid_provider.core.validation import (
    Count,
    Finite,
    Flag,
    JsonModel,
    NonNegative,
    Positive,
    model,
)

SCALING_LOSS_CAP = 0.5
"""The largest per-doubling loss a fit may report: beyond it extra nodes would not help."""
PESSIMISM = 1.25
"""Before a job measured two sizes, a stream's first scale-up counts on this many times the
prior's loss per doubling: a too-small jump costs a second restart and a backlog."""
FIT_MIN_SPAN = 1.2
"""Sizes closer than 20% only fit noise: below this span the prior is used alone."""
FIT_FULL_SPAN_DOUBLINGS = 1.0
"""A fit over sizes a factor of 2 apart is trusted fully; closer sizes blend with the prior."""


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ``ys`` over ``xs`` (0 when ``xs`` do not spread)."""
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread <= 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread


@model
class SizeMeasurement(ForwardCompatible, JsonModel):
    """Per-node throughput the job measured at one size (work per node-second of busy time)."""

    WHERE = "measurement"

    nodes: Positive
    steps_per_node_s: NonNegative
    tokens_per_node_s: NonNegative
    samples: Count = 0
    measured_at: Finite | None = None
    extras: Extras = extras_field()

    def rate(self, basis: WorkBasis) -> float:
        """Per-node throughput in ``basis`` (``steps`` or ``tokens``) per second."""
        return self.tokens_per_node_s if basis == WorkBasis.TOKENS else self.steps_per_node_s


@model
class CapacityMemory(ForwardCompatible, JsonModel):
    """What the job measured at each size it ran at, kept across resizes (one entry per size)."""

    sizes: tuple[SizeMeasurement, ...] = ()
    arrivals: Flag = False
    extras: Extras = extras_field()
    """The job's work was once seen arriving on its own clock (a stream): later windows are
    read as an open loop too, even when the stream runs so busy that no gap shows."""

    @field_validator("sizes")
    @classmethod
    def _one_per_size(cls, entries: tuple[SizeMeasurement, ...]) -> tuple[SizeMeasurement, ...]:
        by_nodes = {entry.nodes: entry for entry in entries}
        return tuple(by_nodes[n] for n in sorted(by_nodes))

    def with_measurement(self, measurement: SizeMeasurement) -> CapacityMemory:
        """A copy in which ``measurement`` replaces what was known at its size."""
        kept = tuple(entry for entry in self.sizes if entry.nodes != measurement.nodes)
        sizes = tuple(sorted((*kept, measurement), key=lambda entry: entry.nodes))
        return CapacityMemory(sizes=sizes, arrivals=self.arrivals)

    def measured(self, basis: WorkBasis) -> list[tuple[int, float]]:
        """``(nodes, per-node rate)`` of each size measured in ``basis``, smallest first."""
        return [(e.nodes, e.rate(basis)) for e in self.sizes if e.rate(basis) > 0]

    def throughput(self) -> dict[int, float]:
        """The whole job's throughput measured at each size (tokens per second when the job
        reports tokens, else steps): what the sharing rules' gain per node is computed from."""
        basis = WorkBasis.TOKENS if self.measured(WorkBasis.TOKENS) else WorkBasis.STEPS
        return {nodes: nodes * rate for nodes, rate in self.measured(basis)}

    def fitted_loss(self, basis: WorkBasis) -> tuple[float, float] | None:
        """The least-squares per-doubling loss over the measured sizes and how far to trust it
        (1 once they span a factor of 2); ``None`` with fewer than two sizes 20% apart."""
        points = self.measured(basis)
        sizes_known = [nodes for nodes, _ in points]
        if len(points) < 2 or max(sizes_known) < FIT_MIN_SPAN * min(sizes_known):
            return None
        trust = min(1.0, math.log2(max(sizes_known) / min(sizes_known)) / FIT_FULL_SPAN_DOUBLINGS)
        fit = slope([math.log2(nodes) for nodes, _ in points], [math.log(r) for _, r in points])
        return min(SCALING_LOSS_CAP, max(0.0, 1.0 - math.exp(fit))), trust

    def scaling(self, basis: WorkBasis, prior: float) -> tuple[float, str]:
        """The per-doubling loss of per-node throughput, and where it comes from."""
        found = self.fitted_loss(basis)
        if found is None:
            return prior, "prior"
        fitted, trust = found
        loss = trust * fitted + (1.0 - trust) * prior
        sizes = ", ".join(str(nodes) for nodes, _ in self.measured(basis))
        return loss, f"measured at {sizes} nodes ({trust:.0%} weight, the rest the prior)"

    def calibrated_scaling(self, basis: WorkBasis, prior: float) -> tuple[float, str]:
        """The loss a stream counts on for a size it never ran at: learnt from this job's own
        sizes when two or more are measured (the larger of the fit and :meth:`scaling`'s
        blend, so a short span never promises more than the prior), else the pessimistic
        default, ``PESSIMISM`` times the prior."""
        found = self.fitted_loss(basis)
        if found is None:
            default = min(SCALING_LOSS_CAP, PESSIMISM * prior)
            return default, f"pessimistic default ({PESSIMISM:g} x the prior)"
        blended, _ = self.scaling(basis, prior)
        sizes = ", ".join(str(nodes) for nodes, _ in self.measured(basis))
        return max(found[0], blended), f"learnt from this job's sizes {sizes}"

    def per_node_rate(self, basis: WorkBasis, nodes: int, loss: float) -> float:
        """Per-node throughput at ``nodes``: the nearest measured size's, ``loss`` per doubling."""
        points = self.measured(basis)
        if not points:
            return 0.0
        anchor, rate = min(points, key=lambda point: (abs(math.log(nodes / point[0])), point[0]))
        return rate * (1.0 - loss) ** math.log2(nodes / anchor)

    @classmethod
    def model_validate(cls, data: Any, *, where: str | None = None) -> CapacityMemory:
        """Rebuild from :meth:`model_dump` output; ``None`` or ``{}`` is an empty memory."""
        return cls() if data is None else super().model_validate(data, where=where)


NO_MEASUREMENTS = CapacityMemory()
