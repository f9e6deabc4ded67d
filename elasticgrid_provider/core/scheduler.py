"""The scale decision: how big should a training job be right now?

:meth:`ElasticScheduler.decide` reads a :class:`MetricsWindow` (samples at
the current size), the :class:`CapacityMemory` of earlier sizes and the
sizes recent checks recommended, and answers ``scale_up``, ``scale_down`` or
``hold`` with a target, a reason, the rule that fired, the rules that held
it back and the projected numbers. It is pure: the caller passes ``now``
(epoch seconds), the deadline and the :class:`CooldownClock` and stores the
result, so any process decides alike and a record replays from its inputs
(SPEC 2, 4.6.5); :meth:`elasticgrid_provider.core.state.ScaleState.advance`
wraps it. Every resize stops and relaunches the job (``startup_s`` of no
progress on paid nodes), so the policy sizes to measured demand and resizes
only when the change pays for that restart.

**What the window measures** (:func:`estimate_load`), in tokens when every
sample has them, else steps. A step's work arrived at ``time - duration_s``.

* *Closed loop* (batch training, or samples without ``time``): ``queue_s``
  is time waiting for a busy worker; capacity is work per second of step,
  demand ``capacity / (1 - queue_fraction)``.
* *Open loop* (a stream): work arrives before the previous step ended (a
  backlog), or idle gaps with nothing queued add up to a fifth of the time
  (logging and checkpoints stay below it); once seen, ``arrivals`` keeps
  the job's timed windows open loop. Demand is the *arrival rate* since it
  last changed (:func:`since_rate_change`: older arrivals are dropped once
  two rates are significantly likelier than one, so a fallen load is not
  read as still falling); capacity is work per second of active time; the
  backlog is the newest ``queue_s``, its *trend* the slope of ``queue_s``
  over time, its drain time ``backlog / (1 - demand / capacity)``.

**Scaling efficiency.** Per-node throughput measured at each size is kept
(:class:`CapacityMemory`); other sizes extrapolate from the nearest one,
losing a share per doubling: fitted (least squares of log throughput on
log2 nodes, in [0, 0.5]) from sizes at least 20% apart, blended with the
prior ``scaling_loss`` until they span a factor of 2. Below every measured
size the smaller of fit and prior is used: overhead grows with size, so a
loss fitted at large sizes would make a shrink go too deep.

Rules, in order; the first that fires decides:

1. ``min_samples``: fewer samples than ``min_samples`` -> hold.
2. ``bounds``: below ``min_nodes`` -> scale up to it; above ``max_nodes`` ->
   scale *down* to it (0.1.0 scaled up, defect 4.6.4). No cooldown or price
   holds this fix back; it starts the cooldown.
3. With a deadline and remaining work (``remaining_steps``, else
   ``remaining_tokens``; none left -> ``balanced``): ``deadline_pressure``
   when the current size misses ``(1 - deadline_margin)`` of the time left:
   the smallest (so cheapest) size whose finish plus ``startup_s`` fits, or
   ``max_nodes`` saying the deadline will be missed; held by ``ceiling``,
   ``deadline`` (no more than ``startup_s`` left) and ``cooldown``.
   ``deadline_slack`` when a smaller size fits in ``(1 - 2 *
   deadline_margin)`` (so the next check does not grow it back): held by
   ``restart_cost`` unless the node-seconds saved, ``n*T(n) - m*T(m)``, beat
   the price by ``resize_margin`` and exceed ``tolerance`` of what is left to
   pay; by ``final_stretch`` in the last ``final_stretch_s``; by
   stabilisation and cooldown.
4. ``demand`` (open loop): the smallest size covering ``demand * (1 + h)``
   and ``demand * (1 + startup_s / drain_s)``; ``h``, two standard
   deviations of the arrival rate (spread of the gaps per unit of work over
   the square root of their count), kept in [``tolerance``, ``headroom``];
   a shrink keeps the full ``headroom``, a band that keeps a steady load
   steady. Demand is the larger of the window's and its newer half's rate
   and, while the queue grows, ``capacity / (1 - trend)``. A backlog that
   drains within ``drain_s`` adds nothing (the trend counts, not the level,
   so a restart's backlog never triggers another scale-up); one that grows,
   or that a resize would clear ``1 + resize_margin`` times sooner, adds what
   serves the waiting work and the restart's arrivals within ``drain_s``
   (sizing to *clear* it bought capacity a second restart trimmed).
   ``stabilisation`` holds a scale-up until a second check wants it too;
   while the queue's growth speeds up (the newest pair of steps implies over
   ``tolerance`` more demand than the pair before: the trend mixes steps from
   before a rise, and re-reading them made a staircase); and while the
   recommendation rises by over ``tolerance`` with a backlog under ``drain_s
   / 2``. A scale-down waits while the newer half arrives slower than the
   whole, and is held by ``restart_cost`` when the backlog and its
   restart's would not drain within ``drain_s``.
5. ``queue_bound`` (closed loop, ``queue_fraction >= target_queue_fraction``):
   ``ceil(current / (1 - queue_fraction))``, or ``current * scale_up_factor``
   when the queue fills the step. ``idle`` (mean step <= ``idle_step_fraction
   * target_step_s``, ``queue_fraction <= idle_queue_fraction``): the
   smallest size projecting a step of at most ``target_step_s / (1 +
   headroom)``, no deeper than ``current * scale_down_factor``; held by
   ``floor``. Both pay ``restart_cost``: a scale-up saves ``H * (1 -
   capacity(n) / capacity(m))`` seconds against ``startup_s``, a shrink
   node-seconds against ``max(n, m) * startup_s``, over ``H``, the projected
   finish when the remaining work is known, else ``horizon_s``.
6. ``balanced``: hold.

Stabilisation, as Kubernetes' HPA does it: no change within ``tolerance`` of
the current capacity; a scale-down acts on the *largest* size recommended in
the last ``scale_down_window_s`` and waits while that is the current size or
the newest recommendation is over ``tolerance`` below it (one change, not a
staircase). Scale-ups wait ``cooldown_s``, scale-downs
``scale_down_cooldown_s`` (default ``cooldown_s``) after any change (one
recorded in the future counts unless that cooldown is 0). Each decision
records ``recommended_nodes`` and its projection: demand, capacity, backlog,
scaling loss and source, finish times, restart cost, gain and price; and its
``conditions`` (:mod:`~elasticgrid_provider.core.conditions`: ``AbleToScale``,
``ScalingActive``, ``ScalingLimited``, as Kubernetes' HPA reports them), computed
here once so the UI and the CLI only render them.

Parameters, in terms of the job (none is fitted to a benchmark):

* ``startup_s``: how long a resize stops progress; priced at the larger
  size, as the old nodes are paid until the new ones run.
* ``horizon_s`` (3600): the expected run when the remaining work is unknown.
* ``resize_margin`` (1.0): a gain projected from a short window and a model
  must be twice the price.
* ``headroom`` (0.2): a shrink may be misread by a fifth before growing back.
* ``tolerance`` (0.1): changes within 10% (or saving under 10% of what is
  left to pay) are noise.
* ``drain_s`` (1800): the latency a stream tolerates after a change.
* ``scale_down_window_s`` (600): longer than a bursty load's gaps.
* ``deadline_margin`` (0.1): spare time against projection errors.
* ``final_stretch_s`` (``4 * startup_s``): undoing a late shrink costs a restart.
* ``scaling_loss`` (0.1): typical of data-parallel all-reduce, which grows
  with the log of the node count.
* ``scale_up_factor``, ``scale_down_factor``: 0.1.0's factors, kept as the
  growth when no active time is left to size from and the deepest shrink.
"""

from __future__ import annotations

import itertools
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Annotated, Any

from pydantic import ValidationInfo, field_validator, model_validator

from elasticgrid_provider.core.conditions import (
    ScaleCondition,
    able_to_scale,
    scaling_active,
    scaling_limited,
)
from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.formatting import bounded_or_none, number_text, seconds_text
from elasticgrid_provider.core.monotone import smallest_satisfying
from elasticgrid_provider.core.samples import MetricsWindow, StepSample, WindowSignals
from elasticgrid_provider.core.validation import (
    Choice,
    Count,
    Finite,
    Flag,
    JsonModel,
    NonNegative,
    Positive,
    Text,
    check_integer,
    check_number,
    choice,
    finite,
    model,
    trusted,
)


class DecisionRule(Choice):
    """The rule a decision names as the one that fired (module notes, in evaluation order)."""

    MIN_SAMPLES = "min_samples"
    BOUNDS = "bounds"
    DEADLINE_PRESSURE = "deadline_pressure"
    DEADLINE_SLACK = "deadline_slack"
    DEMAND = "demand"
    QUEUE_BOUND = "queue_bound"
    IDLE = "idle"
    BALANCED = "balanced"


class HoldRule(Choice):
    """A rule that can hold back a scale change."""

    CEILING = "ceiling"
    FLOOR = "floor"
    DEADLINE = "deadline"
    FINAL_STRETCH = "final_stretch"
    RESTART_COST = "restart_cost"
    STABILISATION = "stabilisation"
    COOLDOWN = "cooldown"


RULES = tuple(rule.value for rule in DecisionRule)
HOLD_RULES = tuple(rule.value for rule in HoldRule)


class ScaleAction(Choice):
    """What a decision asks for."""

    SCALE_UP = "scale_up"
    SCALE_DOWN = "scale_down"
    HOLD = "hold"


def _optional_number(field_name: str, value: Any, *, minimum: float | None) -> float | None:
    """``None`` stays ``None``; anything else must be a finite number."""
    return None if value is None else check_number(field_name, value, minimum=minimum)


def _require(kind: type, field_name: str, value: Any) -> None:
    if not isinstance(value, kind):
        raise ElasticGridError(f"{field_name} must be a {kind.__name__}, got {value!r}")


@model
class CooldownClock(JsonModel):
    """When the job last changed size, and how: the whole cooldown state, stored by the caller."""

    WHERE = "cooldown"

    last_change_at: Finite | None = None
    last_action: (
        Annotated[ScaleAction, choice(ScaleAction, ScaleAction.SCALE_UP, ScaleAction.SCALE_DOWN)]
        | None
    ) = None

    def seconds_since_change(self, now: float) -> float | None:
        """Seconds from the last change to ``now``; ``None`` when there was none."""
        return None if self.last_change_at is None else now - self.last_change_at


NO_COOLDOWN = CooldownClock()
"""The clock of a job that has never changed size."""


@model
class HeldBy(JsonModel):
    """A rule that stopped a scale change, and why in one sentence."""

    WHERE = "held_by"

    rule: Annotated[str, choice(HoldRule)]  # str: the rules pass their names
    reason: Text


SCALING_LOSS_CAP = 0.5
"""The largest per-doubling loss a fit may report: beyond it extra nodes would not help."""
FIT_MIN_SPAN = 1.2
"""Sizes closer than 20% only fit noise: below this span the prior is used alone."""
FIT_FULL_SPAN_DOUBLINGS = 1.0
"""A fit over sizes a factor of 2 apart is trusted fully; closer sizes blend with the prior."""
TREND_SAMPLES = 3
"""The queue's trend is read from the newest three steps: a change shows at once."""
MAX_QUEUE_TREND = 0.9
"""A queue growing this fast or faster reads as 10 times the capacity (the estimate's cap)."""
IDLE_GAP_SHARE = 0.2
"""Idle gaps (nothing queued) this share of the time mean the job waits for arriving work."""
ARRIVAL_SPREAD_DEVIATIONS = 2.0
"""A stream's headroom covers the arrival rate two standard deviations above its mean."""
UNBOUNDED_FACTOR = 1024
"""The ceiling of the unbounded policy that tells whether a bound clamped a recommendation,
as a multiple of the larger of ``max_nodes`` and the current size."""
_LOOP_TOLERANCE = 0.05
"""Gaps between steps within 5% of a step (and 1 ms) are bookkeeping, not idle time."""


@model
class SizeMeasurement(JsonModel):
    """Per-node throughput the job measured at one size (work per node-second of busy time)."""

    WHERE = "measurement"

    nodes: Positive
    steps_per_node_s: NonNegative
    tokens_per_node_s: NonNegative
    samples: Count = 0
    measured_at: Finite | None = None

    def rate(self, basis: str) -> float:
        """Per-node throughput in ``basis`` (``steps`` or ``tokens``) per second."""
        return self.tokens_per_node_s if basis == "tokens" else self.steps_per_node_s


@model
class CapacityMemory(JsonModel):
    """What the job measured at each size it ran at, kept across resizes (one entry per size)."""

    WHERE = "capacity memory"

    sizes: tuple[SizeMeasurement, ...] = ()
    arrivals: Flag = False
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
        return trusted(CapacityMemory, sizes=sizes, arrivals=self.arrivals)

    def measured(self, basis: str) -> list[tuple[int, float]]:
        """``(nodes, per-node rate)`` of each size measured in ``basis``, smallest first."""
        return [(e.nodes, e.rate(basis)) for e in self.sizes if e.rate(basis) > 0]

    def scaling(self, basis: str, prior: float) -> tuple[float, str]:
        """The per-doubling loss of per-node throughput, and where it comes from."""
        points = self.measured(basis)
        sizes_known = [nodes for nodes, _ in points]
        if len(points) < 2 or max(sizes_known) < FIT_MIN_SPAN * min(sizes_known):
            return prior, "prior"
        trust = min(1.0, math.log2(max(sizes_known) / min(sizes_known)) / FIT_FULL_SPAN_DOUBLINGS)
        slope = _slope([math.log2(nodes) for nodes, _ in points], [math.log(r) for _, r in points])
        fitted = min(SCALING_LOSS_CAP, max(0.0, 1.0 - math.exp(slope)))
        loss = trust * fitted + (1.0 - trust) * prior
        sizes = ", ".join(str(nodes) for nodes, _ in points)
        return loss, f"measured at {sizes} nodes ({trust:.0%} weight, the rest the prior)"

    def per_node_rate(self, basis: str, nodes: int, loss: float) -> float:
        """Per-node throughput at ``nodes``: the nearest measured size's, ``loss`` per doubling."""
        points = self.measured(basis)
        if not points:
            return 0.0
        anchor, rate = min(points, key=lambda point: (abs(math.log(nodes / point[0])), point[0]))
        return rate * (1.0 - loss) ** math.log2(nodes / anchor)

    @classmethod
    def from_dict(cls, data: Any) -> CapacityMemory:
        """Rebuild from :meth:`to_dict` output; ``None`` or ``{}`` is an empty memory."""
        return cls() if data is None else cls.model_validate(data)


NO_MEASUREMENTS = CapacityMemory()


@model
class Recommendation(JsonModel):
    """The size one check recommended (before stabilisation), and when."""

    WHERE = "recommendation"

    at: Finite
    nodes: Positive


@dataclass(frozen=True)
class LoadEstimate:
    """Demand, capacity and backlog measured from samples at one size (see the module notes)."""

    nodes: int
    samples: int
    open_loop: bool
    basis: str
    capacity_per_s: float
    demand_per_s: float
    backlog_s: float
    backlog_trend: float
    steps_per_node_s: float
    tokens_per_node_s: float
    window_demand_per_s: float = 0.0
    recent_demand_per_s: float = 0.0

    @property
    def falling(self) -> bool:
        """The newer half of the window arrives slower than the whole: the load is falling."""
        return self.recent_demand_per_s < self.window_demand_per_s * 0.9

    @property
    def utilisation(self) -> float:
        """Demand over capacity at the current size (above 1: work piles up)."""
        return self.demand_per_s / self.capacity_per_s if self.capacity_per_s > 0 else 0.0

    @property
    def drain_s(self) -> float | None:
        """Seconds to clear the backlog at the current size; ``None`` when it never clears."""
        if self.backlog_s <= 0:
            return 0.0
        spare = 1.0 - self.utilisation
        return self.backlog_s / spare if spare > 0 else None

    def measurement(self, measured_at: float | None) -> SizeMeasurement:
        """What these samples say about per-node throughput at this size."""
        return SizeMeasurement(
            self.nodes, self.steps_per_node_s, self.tokens_per_node_s, self.samples, measured_at
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON for the audit record."""
        return {
            "loop": "open" if self.open_loop else "closed",
            "basis": self.basis,
            "demand_per_s": bounded_or_none(self.demand_per_s),
            "capacity_per_s": bounded_or_none(self.capacity_per_s),
            "utilisation": bounded_or_none(self.utilisation),
            "backlog_s": self.backlog_s,
            "backlog_trend": self.backlog_trend,
            "window_demand_per_s": self.window_demand_per_s,
            "recent_demand_per_s": self.recent_demand_per_s,
            "drain_s": bounded_or_none(self.drain_s),
        }


def _slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ``ys`` over ``xs`` (0 when ``xs`` do not spread)."""
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread <= 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread


def _queue_slopes(samples: Sequence[StepSample]) -> tuple[float, ...]:
    """The slope of ``queue_s`` over the steps' end times between each successive pair; empty
    when a step has no time or two ended at once (the reporter's clock only, for replays)."""
    slopes = []
    for previous, sample in itertools.pairwise(samples):
        if previous.time is None or sample.time is None or sample.time <= previous.time:
            return ()
        slopes.append((sample.queue_s - previous.queue_s) / (sample.time - previous.time))
    return tuple(slopes)


def _is_open_loop(samples: tuple[StepSample, ...]) -> bool:
    """Work arrived on its own clock: before the previous step ended, or after idle gaps
    (nothing queued) adding up to ``IDLE_GAP_SHARE`` of the time."""
    idle = busy = 0.0
    for previous, sample in itertools.pairwise(samples):
        started, ended = sample.started_at, previous.time
        if started is None or ended is None:
            return False
        slack = _LOOP_TOLERANCE * sample.duration_s + 1e-3
        if started < ended - slack:
            return True  # it waited behind the previous step: a backlog
        busy += sample.duration_s
        if started > ended and sample.queue_s <= slack:
            idle += started - ended  # the job sat idle waiting for work
    return idle > 0 and idle >= IDLE_GAP_SHARE * (idle + busy)


def _arrival_rate(samples: Sequence[StepSample], basis: str) -> float:
    """Work per second between the first and the last arrival (0 without a time span)."""
    starts = [sample.started_at or 0.0 for sample in samples]
    span = starts[-1] - starts[0]
    if span <= 0:
        return 0.0
    later = samples[1:]
    work = math.fsum(s.tokens for s in later) if basis == "tokens" else float(len(later))
    return work / span


def _work_gaps(samples: Sequence[StepSample], basis: str) -> list[float] | None:
    """Seconds between successive arrivals per unit of work, scaled so the largest is 1 (the
    rules reading them are scale-free, and no square or sum can overflow); ``None`` without
    arrival times, or when a step's work is too small to divide by."""
    gaps = []
    for previous, sample in itertools.pairwise(samples):
        work = sample.tokens if basis == "tokens" else 1.0
        if previous.started_at is None or sample.started_at is None or work <= 0:
            return None
        gap = (sample.started_at - previous.started_at) / work
        if not math.isfinite(gap):
            return None
        gaps.append(gap)
    scale = max((abs(gap) for gap in gaps), default=0.0)
    return [gap / scale for gap in gaps] if scale > 0 else gaps


def _arrival_spread(samples: Sequence[StepSample], basis: str) -> float:
    """Relative standard deviation of the arrival rate: the coefficient of variation of the
    gaps per unit of work over ``sqrt(n)`` (steady: near 0; Poisson: about ``1 / sqrt(n)``)."""
    gaps = _work_gaps(samples, basis)
    if gaps is None or len(gaps) < 2:
        return 0.0
    mean = math.fsum(gaps) / len(gaps)
    if mean <= 0:
        return 0.0
    spread = math.sqrt(math.fsum((gap - mean) ** 2 for gap in gaps) / (len(gaps) - 1))
    return min(spread / mean / math.sqrt(len(gaps)), sys.float_info.max)


RATE_CHANGE_SIGNIFICANCE = 10.83
"""A change in arrival rate is taken as real when twice the log-likelihood ratio of a two-rate
over a one-rate model of the gaps reaches 10.83 (the chi-square 0.1% level, one degree)."""
RATE_CHANGE_MIN_GAPS = 2
"""A rate change needs at least two gaps measured on each side of it."""


def since_rate_change(samples: Sequence[StepSample], basis: str) -> Sequence[StepSample]:
    """The samples that arrived since the arrival rate last changed (all of them when it did not).

    The gaps per unit of work are read as exponential; their likeliest split into two rates
    is a change when it passes ``RATE_CHANGE_SIGNIFICANCE``.
    """
    gaps = _work_gaps(samples, basis)
    if gaps is None or len(gaps) < 2 * RATE_CHANGE_MIN_GAPS:
        return samples
    gaps = [max(gap, 0.0) for gap in gaps]  # arrivals out of order count as simultaneous

    def spent(part: list[float]) -> float:
        mean = math.fsum(part) / len(part)
        return len(part) * math.log(mean) if mean > 0 else -math.inf

    whole = spent(gaps)
    best, split = 0.0, 0
    for index in range(RATE_CHANGE_MIN_GAPS, len(gaps) - RATE_CHANGE_MIN_GAPS + 1):
        ratio = 2.0 * (whole - spent(gaps[:index]) - spent(gaps[index:]))
        if math.isfinite(ratio) and ratio > best:
            best, split = ratio, index
    if best < RATE_CHANGE_SIGNIFICANCE:
        return samples
    return samples[split:]


def estimate_load(
    samples: Sequence[StepSample], nodes: int, *, arrivals: bool = False
) -> LoadEstimate | None:
    """Demand, capacity and backlog of ``samples`` at ``nodes`` (module notes); ``None`` without
    work. ``arrivals`` (the job was seen to be a stream) reads timed samples as an open loop."""
    ordered = tuple(samples)
    if not ordered:
        return None
    count = len(ordered)
    total_tokens = math.fsum(sample.tokens for sample in ordered)
    basis = "tokens" if all(sample.tokens > 0 for sample in ordered) else "steps"
    timed = all(sample.time is not None for sample in ordered)
    open_loop = count >= 2 and ((arrivals and timed) or _is_open_loop(ordered))
    # an open loop needs arrivals spread over time
    open_loop = open_loop and (ordered[-1].started_at or 0.0) > (ordered[0].started_at or 0.0)
    busy_s = math.fsum(s.active_s if open_loop else s.duration_s for s in ordered)
    if busy_s <= 0:
        return None
    steps_per_s = count / busy_s
    tokens_per_s = total_tokens / busy_s
    capacity = tokens_per_s if basis == "tokens" else steps_per_s
    backlog_s = trend = 0.0
    recent_demand = window_demand = 0.0
    if open_loop:
        current = since_rate_change(ordered, basis)
        window_demand = recent_demand = _arrival_rate(current, basis)
        if len(current) >= 4:  # a rise shows in the newer half first; a fall waits for all
            recent_demand = _arrival_rate(current[len(current) // 2 :], basis)
        latest = ordered[-TREND_SAMPLES:]
        times = [sample.time or 0.0 for sample in latest]
        trend = _slope(times, [sample.queue_s for sample in latest])
        demand = max(window_demand, recent_demand)
        newest = ordered[-1]
        if trend > 0 and newest.queue_s > _LOOP_TOLERANCE * newest.duration_s:
            # served steps lag behind a growing queue; the wait grows by 1 - capacity/demand
            # per second, so the queue's growth tells the demand before the steps do
            demand = max(demand, capacity / (1.0 - min(trend, MAX_QUEUE_TREND)))
        # the work that arrived while the newest step waited is still waiting behind it
        backlog_s = ordered[-1].queue_s * min(demand / capacity, 1e6) if capacity > 0 else 0.0
    else:
        queued = math.fsum(sample.queue_s for sample in ordered)
        total = math.fsum(sample.duration_s for sample in ordered)
        waiting = min(queued / total, 1.0) if total > 0 else 0.0
        demand = capacity / (1.0 - waiting) if waiting < 1.0 else sys.float_info.max
    return LoadEstimate(
        nodes=nodes,
        samples=count,
        open_loop=open_loop,
        basis=basis,
        capacity_per_s=capacity,
        demand_per_s=min(demand, sys.float_info.max),
        backlog_s=backlog_s,
        backlog_trend=trend,
        window_demand_per_s=window_demand,
        recent_demand_per_s=recent_demand,
        steps_per_node_s=steps_per_s / nodes,
        tokens_per_node_s=tokens_per_s / nodes,
    )


@dataclass(frozen=True)
class _RemainingWork:
    """The work left before the deadline."""

    basis: str  # "steps" or "tokens"
    amount: float

    @property
    def phrase(self) -> str:
        return f"the remaining {number_text(self.amount)} {self.basis}"


@dataclass(frozen=True)
class _Situation:
    """The validated inputs of one decision, and what the window measured."""

    signals: WindowSignals
    current: int
    now: float
    cooldown: CooldownClock
    deadline_at: float | None
    work: _RemainingWork | None
    load: LoadEstimate | None
    memory: CapacityMemory
    recent: tuple[Recommendation, ...]
    arrival_spread: float = 0.0
    queue_slopes: tuple[float, ...] = ()
    """The slope of ``queue_s`` over time between each pair of the newest steps, oldest first."""

    @property
    def time_left_s(self) -> float | None:
        return None if self.deadline_at is None else self.deadline_at - self.now


@dataclass(frozen=True)
class _Verdict:
    """What a rule concluded: the change it wants (if any), what held it back, its numbers."""

    rule: str
    why: str
    action: ScaleAction = ScaleAction.HOLD
    target: int | None = None
    held_by: tuple[HeldBy, ...] = ()
    recommended: int | None = None
    numbers: dict[str, Any] = field(default_factory=dict)


def _stay(rule: str, why: str, current: int, numbers: dict[str, Any] | None = None) -> _Verdict:
    """A verdict keeping the current size."""
    return _Verdict(rule, why, recommended=current, numbers=numbers or {})


def _change(
    rule: str,
    why: str,
    action: ScaleAction,
    target: int,
    holds: Sequence[HeldBy | None],
    numbers: dict[str, Any],
) -> _Verdict:
    """A verdict wanting ``target``, held back by those of ``holds`` that apply."""
    held = tuple(hold for hold in holds if hold is not None)
    return _Verdict(rule, why, action, target, held, recommended=target, numbers=numbers)


@model
class ElasticScheduler(JsonModel):
    """The scale policy: bounds, cooldowns, thresholds, restart price and margins.

    See the module notes for what each parameter means for the job.
    """

    OWNER = "scheduler"

    min_nodes: Positive = 1
    max_nodes: Positive = 1024
    scale_up_factor: Annotated[float, finite(1.0, exclusive_minimum=True)] = 2.0
    scale_down_factor: Annotated[
        float, finite(0.0, 1.0, exclusive_minimum=True, exclusive_maximum=True)
    ] = 0.5
    cooldown_s: NonNegative = 300.0
    scale_down_cooldown_s: NonNegative | None = None
    target_queue_fraction: Annotated[float, finite(0.0, 1.0)] = 0.2
    idle_queue_fraction: Annotated[float, finite(0.0, 1.0)] = 0.05
    idle_step_fraction: Annotated[float, finite(exclusive_minimum=True)] = 0.5
    target_step_s: Annotated[float, finite(exclusive_minimum=True)] = 30.0
    min_samples: Positive = 3
    startup_s: NonNegative = 0.0
    horizon_s: Annotated[float, finite(exclusive_minimum=True)] = 3600.0
    resize_margin: NonNegative = 1.0
    headroom: NonNegative = 0.2
    tolerance: Annotated[float, finite(0.0, 1.0, exclusive_maximum=True)] = 0.1
    drain_s: Annotated[float, finite(exclusive_minimum=True)] = 1800.0
    scale_down_window_s: NonNegative = 600.0
    deadline_margin: Annotated[float, finite(0.0, 1.0, exclusive_maximum=True)] = 0.1
    final_stretch_s: NonNegative | None = None
    scaling_loss: Annotated[float, finite(0.0, SCALING_LOSS_CAP)] = 0.1

    @field_validator("max_nodes")
    @classmethod
    def _not_below_min_nodes(cls, max_nodes: int, info: ValidationInfo) -> int:
        min_nodes = info.data.get("min_nodes", 1)
        if max_nodes < min_nodes:
            raise ElasticGridError(f"max_nodes must be at least {min_nodes}, got {max_nodes!r}")
        return max_nodes

    @property
    def effective_scale_down_cooldown_s(self) -> float:
        """The scale-down cooldown in force: ``scale_down_cooldown_s``, else ``cooldown_s``."""
        down = self.scale_down_cooldown_s
        return self.cooldown_s if down is None else down

    @property
    def effective_final_stretch_s(self) -> float:
        """The no-shrink stretch before a deadline: ``final_stretch_s``, else 4 restarts."""
        stretch = self.final_stretch_s
        return 4.0 * self.startup_s if stretch is None else stretch

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON of the parameters as given: ``model_dump``'s, built directly (a hot path)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    def thresholds(self) -> dict[str, Any]:
        """Every parameter as used (defaults resolved), for the audit record."""
        return {
            **self.to_dict(),
            "scale_down_cooldown_s": self.effective_scale_down_cooldown_s,
            "final_stretch_s": self.effective_final_stretch_s,
        }

    def decide(
        self,
        window: MetricsWindow,
        *,
        now: float,
        current_nodes: int | None = None,
        cooldown: CooldownClock = NO_COOLDOWN,
        deadline_at: float | None = None,
        remaining_steps: float | None = None,
        remaining_tokens: float | None = None,
        capacity: CapacityMemory = NO_MEASUREMENTS,
        recent: Sequence[Recommendation] = (),
    ) -> ScaleDecision:
        """Decide the job's size from ``window`` at ``now`` (epoch seconds); see the module notes.

        ``current_nodes`` defaults to the newest sample's; ``deadline_at`` is epoch seconds and
        ``remaining_steps`` or ``remaining_tokens`` let the deadline rule project the finish.
        ``capacity``: what the job measured at each size (the window's measurement wins at its
        size); ``recent``: the sizes recent checks recommended (the scale-down stabilisation).
        """
        _require(MetricsWindow, "window", window)
        _require(CooldownClock, "cooldown", cooldown)
        _require(CapacityMemory, "capacity", capacity)
        recommended = tuple(recent)
        for entry in recommended:
            _require(Recommendation, "recent recommendation", entry)
        signals = window.signals()
        if current_nodes is None:
            current = signals.nodes
        else:
            current = check_integer("current_nodes", current_nodes, minimum=1)
        deadline = _optional_number("deadline_at", deadline_at, minimum=None)
        steps = _optional_number("remaining_steps", remaining_steps, minimum=0.0)
        tokens = _optional_number("remaining_tokens", remaining_tokens, minimum=0.0)
        load = (
            estimate_load(window.samples, current, arrivals=capacity.arrivals)
            if current >= 1
            else None
        )
        now = check_number("now", now, minimum=None)
        memory = capacity if load is None else capacity.with_measurement(load.measurement(None))
        work = None
        if deadline is None:
            pass
        elif steps is not None and memory.per_node_rate("steps", current, 0.0) > 0:
            work = _RemainingWork("steps", steps)
        elif tokens is not None and memory.per_node_rate("tokens", current, 0.0) > 0:
            work = _RemainingWork("tokens", tokens)
        if work is not None:
            rate = current * memory.per_node_rate(work.basis, current, 0.0)
            if not math.isfinite(work.amount / rate):
                raise ElasticGridError(
                    f"remaining_{work.basis} {work.amount!r} is too large to project a finish time"
                )
        spread = 0.0
        if load is not None and load.open_loop:
            spread = _arrival_spread(since_rate_change(window.samples, load.basis), load.basis)
        situation = _Situation(
            signals=signals,
            current=current,
            now=now,
            cooldown=cooldown,
            deadline_at=deadline,
            work=work,
            load=load,
            memory=memory,
            recent=recommended,
            arrival_spread=spread,
            queue_slopes=_queue_slopes(window.samples[-TREND_SAMPLES:]),
        )
        verdict = (
            self._min_samples_rule(situation)
            or self._bounds_rule(situation)
            or self._policy(situation)
        )
        return self._decision(situation, verdict)

    # -- the throughput model -------------------------------------------------

    def _capacity(self, situation: _Situation, basis: str, nodes: int) -> float:
        """Projected throughput of the whole job at ``nodes`` (work per second)."""
        loss, _ = situation.memory.scaling(basis, self.scaling_loss)
        measured = [size for size, _ in situation.memory.measured(basis)]
        if measured and nodes < min(measured):
            # below every measured size, a shrink counts on no more than fit or prior promise
            loss = min(loss, self.scaling_loss)
        return nodes * situation.memory.per_node_rate(basis, nodes, loss)

    def _finish_s(self, situation: _Situation, work: _RemainingWork, nodes: int) -> float:
        """Seconds ``work`` takes at ``nodes`` (no restart); capped to stay finite."""
        capacity = self._capacity(situation, work.basis, nodes)
        if capacity <= 0:
            return sys.float_info.max
        return min(work.amount / capacity, sys.float_info.max)

    def _restart_price_node_s(self, current: int, target: int) -> float:
        return max(current, target) * self.startup_s

    # -- rules ----------------------------------------------------------------

    def _min_samples_rule(self, situation: _Situation) -> _Verdict | None:
        count = situation.signals.samples
        if count >= self.min_samples:
            return None
        why = f"not enough samples to decide: {count} of {self.min_samples}"
        if situation.current == 0:
            why += "; the current size is unknown until a sample arrives"
        return _Verdict("min_samples", why)

    def _bounds_rule(self, situation: _Situation) -> _Verdict | None:
        current = situation.current
        if current < self.min_nodes:
            why = f"current size {current} is below the floor of {self.min_nodes}"
            action, target = ScaleAction.SCALE_UP, self.min_nodes
        elif current > self.max_nodes:
            why = f"current size {current} is above the ceiling of {self.max_nodes}"
            action, target = ScaleAction.SCALE_DOWN, self.max_nodes
        else:
            return None
        if self._cooldown_hold(situation, action) is not None:
            why += " (bounds corrections ignore the cooldown)"
        return _Verdict("bounds", why, action, target, recommended=target)

    def _policy(self, situation: _Situation) -> _Verdict:
        load = situation.load
        if situation.work is not None and situation.deadline_at is not None:
            verdict = self._deadline_rule(situation)
        elif load is not None and load.open_loop:
            verdict = self._demand_rule(situation, load)
        elif load is not None:
            verdict = self._closed_loop_rule(situation, load)
        else:
            why = "the samples show no work to size from; hold the current size"
            verdict = _stay("balanced", why, situation.current)
        return self._gated(situation, verdict)

    def _deadline_rule(self, situation: _Situation) -> _Verdict:
        work, time_left = situation.work, situation.time_left_s
        assert work is not None and time_left is not None  # guarded by _policy
        current = situation.current
        if work.amount <= 0:
            return _stay(
                "balanced", f"no work is left ({work.phrase}); hold the current size", current
            )
        budget = (1.0 - self.deadline_margin) * time_left
        finish_now = self._finish_s(situation, work, current)
        numbers: dict[str, Any] = {"deadline_budget_s": budget}  # _projection adds the finishes
        left_text = f"{seconds_text(time_left)} are left" if time_left > 0 else "no time is left"
        explanation = (
            f"at {current} nodes {work.phrase} take {seconds_text(finish_now)} and {left_text} "
            f"({seconds_text(max(budget, 0.0))} after the {self.deadline_margin:.0%} margin)"
        )

        def fits(nodes: int, budget_s: float) -> bool:
            """``nodes`` finish within ``budget_s``, the restart included."""
            return self.startup_s + self._finish_s(situation, work, nodes) <= budget_s

        if finish_now <= budget:
            # a shrink must fit with twice the margin, so the next check does not grow it back
            shrink_budget = (1.0 - 2.0 * self.deadline_margin) * time_left
            smallest = smallest_satisfying(
                lambda nodes: fits(nodes, shrink_budget), self.min_nodes, current - 1
            )
            if smallest is None or smallest > current * (1.0 - self.tolerance):
                why = f"{explanation}: on track; hold the current size"
                return _stay("balanced", why, current, numbers)
            finish_target = self._finish_s(situation, work, smallest)
            cost_now = current * finish_now
            saved = cost_now - smallest * finish_target
            price = self._restart_price_node_s(current, smallest)
            finish = finish_target + self.startup_s
            numbers.update(gain=saved, gain_unit="node-seconds", price=price)
            why = (
                f"{explanation}; {smallest} nodes finish in {seconds_text(finish)} with the "
                f"restart and save {number_text(saved)} node-seconds against a restart price "
                f"of {number_text(price)}"
            )
            worth = None
            if saved < self.tolerance * cost_now:
                worth = HeldBy(
                    "restart_cost",
                    f"saving {number_text(saved)} node-seconds is within the "
                    f"{self.tolerance:.0%} tolerance of the {number_text(cost_now)} node-seconds "
                    "left to pay",
                )
            held: list[HeldBy | None] = [
                self._floor_hold(current),
                self._final_stretch_hold(situation),
                self._price_hold(saved, price, "node-seconds") or worth,
            ]
            return _change("deadline_slack", why, ScaleAction.SCALE_DOWN, smallest, held, numbers)
        smallest = smallest_satisfying(
            lambda nodes: fits(nodes, budget), current + 1, self.max_nodes
        )
        # when no resize fits in the budget, the most nodes finish soonest
        target = max(self.max_nodes, current) if smallest is None else smallest
        finish = self._finish_s(situation, work, target) + self.startup_s
        if smallest is None:
            why = f"{explanation}; even {target} nodes need {seconds_text(finish)} with the restart"
            why += ", so the deadline will be missed"
        else:
            why = f"{explanation}; {target} nodes finish in {seconds_text(finish)} with the restart"
        held = [self._ceiling_hold(current), self._startup_hold(situation)]
        return _change("deadline_pressure", why, ScaleAction.SCALE_UP, target, held, numbers)

    def _demand_rule(self, situation: _Situation, load: LoadEstimate) -> _Verdict:
        current = situation.current
        basis, demand, capacity = load.basis, load.demand_per_s, load.capacity_per_s
        drain = load.drain_s
        headroom = min(
            self.headroom, max(self.tolerance, ARRIVAL_SPREAD_DEVIATIONS * situation.arrival_spread)
        )
        need = max(demand * (1.0 + headroom), demand * (1.0 + self.startup_s / self.drain_s))
        backlog_text = ""
        backlog = f"; the backlog of {seconds_text(load.backlog_s)}"
        if load.backlog_s > 0:
            if drain is not None and drain <= self.drain_s:
                backlog_text = (
                    f"{backlog} drains in {seconds_text(drain)}, so it needs no more nodes"
                )
            else:
                # a resize serves nothing for startup_s while work keeps arriving; serve the
                # work waiting after it within drain_s (not demand + waiting: see the notes)
                usable_s = max(self.drain_s - self.startup_s, self.drain_s / 2.0)
                waiting = load.backlog_s * capacity + demand * self.startup_s
                drain_need = max(demand, waiting / usable_s)
                grows = load.utilisation >= 1.0 or load.backlog_trend > 0
                stay_s = math.inf if drain is None else drain
                serving = self._serving(situation, basis, drain_need)
                after_s = self._drain_after_resize(situation, load, serving)
                if grows or stay_s >= (1.0 + self.resize_margin) * max(after_s, self.drain_s):
                    need = max(need, drain_need)
                    trend = "grows" if grows else "will not drain"
                    backlog_text = f"{backlog} {trend} within {seconds_text(self.drain_s)}"
                else:
                    backlog_text = (
                        f"{backlog} drains in {seconds_text(stay_s)}, and a restart would not "
                        "clear it much sooner"
                    )
        target = self._serving(situation, basis, need)
        if target < current and headroom < self.headroom:
            # a shrink keeps the full headroom: the band that keeps a steady load steady
            headroom = self.headroom
            need = max(need, demand * (1.0 + headroom))
            target = self._serving(situation, basis, need)
        numbers = {
            **load.to_dict(),
            "target_capacity_per_s": self._capacity(situation, basis, target),
            "needed_per_s": need,
            "headroom": headroom,
            "arrival_spread": situation.arrival_spread,
        }
        why = (
            f"demand {number_text(demand)} {basis}/s against a capacity of "
            f"{number_text(capacity)} {basis}/s at {current} nodes "
            f"({load.utilisation:.0%} utilised){backlog_text}"
        )
        verdict = self._sized(situation, "demand", why, target, need / capacity, numbers, basis)
        previous = situation.recent[-1].nodes if situation.recent else None
        speeding = self._queue_speeding_up(situation)
        held = list(verdict.held_by)
        unsettled = None  # why a scale-up waits for the next check
        if verdict.action is ScaleAction.SCALE_UP:
            if speeding is not None and load.backlog_s < self.drain_s / 2.0:
                # the trend mixes steps from before and after a rise: half-measured
                unsettled = (
                    f"the queue's growth is still speeding up: the newest steps imply "
                    f"{speeding:.0%} more demand than the ones before them; the next step "
                    "measures the load once more"
                )
            elif previous is None or previous <= current:
                unsettled = (
                    "the first check to find the load above the capacity; the next check "
                    "confirms it with more of the new load measured"
                )
            elif (
                verdict.recommended is not None
                and previous < verdict.recommended * (1.0 - self.tolerance)
                and load.backlog_s < self.drain_s / 2.0
            ):
                unsettled = (
                    f"the load is still rising: {verdict.recommended} nodes now, {previous} at "
                    "the last check; the backlog is short enough to measure it once more"
                )
        if unsettled is not None:
            held.append(HeldBy("stabilisation", unsettled))
        if verdict.action is ScaleAction.SCALE_DOWN and verdict.target is not None:
            after_s = self._drain_after_resize(situation, load, verdict.target)
            if after_s > self.drain_s:
                why = (
                    f"at {verdict.target} nodes the backlog, with the restart's, would take "
                    f"{seconds_text(min(after_s, sys.float_info.max))} to drain, more than "
                    f"{seconds_text(self.drain_s)}"
                )
                held.append(HeldBy("restart_cost", why))
        if verdict.action is ScaleAction.SCALE_DOWN and load.falling:
            why = (
                f"the load is still falling: the newer half of the window arrives at "
                f"{number_text(load.recent_demand_per_s)} {basis}/s, the whole at "
                f"{number_text(load.window_demand_per_s)}"
            )
            held.append(HeldBy("stabilisation", why))
        return replace(verdict, held_by=tuple(held))

    def _queue_speeding_up(self, situation: _Situation) -> float | None:
        """How much more demand (``capacity / (1 - slope)``) the newest queue growth implies than
        the one before it; ``None`` unless the queue grows and that is over ``tolerance``."""
        slopes = situation.queue_slopes
        if len(slopes) < 2 or slopes[-1] <= 0:
            return None
        older, newest = max(slopes[-2], 0.0), min(slopes[-1], MAX_QUEUE_TREND)
        if older >= newest:
            return None
        extra = (1.0 - older) / (1.0 - newest) - 1.0
        return extra if extra > self.tolerance else None

    def _serving(self, situation: _Situation, basis: str, need: float) -> int:
        """The smallest size whose projected capacity covers ``need`` (else ``max_nodes``)."""
        target = smallest_satisfying(
            lambda nodes: self._capacity(situation, basis, nodes) >= need,
            self.min_nodes,
            self.max_nodes,
        )
        return self.max_nodes if target is None else target

    def _drain_after_resize(self, situation: _Situation, load: LoadEstimate, target: int) -> float:
        """Seconds to clear the backlog and the restart's after a resize to ``target``."""
        spare = self._capacity(situation, load.basis, target) - load.demand_per_s
        waiting = load.backlog_s * load.capacity_per_s + load.demand_per_s * self.startup_s
        return self.startup_s + (waiting / spare if spare > 0 else math.inf)

    def _closed_loop_rule(self, situation: _Situation, load: LoadEstimate) -> _Verdict:
        signals = situation.signals
        current = situation.current
        basis = load.basis
        numbers = load.to_dict()
        if signals.queue_fraction >= self.target_queue_fraction:
            why = f"{signals.queue_fraction:.0%} of the step was spent waiting for a worker"
            if signals.mean_active_s <= 0 or signals.queue_fraction >= 1.0:
                target = min(self.max_nodes, max(current + 1, int(current * self.scale_up_factor)))
                why += f" and none of it was active, so grow by {self.scale_up_factor:g}x"
            else:
                # the queue counts the workers the step waited for: that many more remove it
                workers = math.ceil(round(current / (1.0 - signals.queue_fraction), 9))
                target = min(self.max_nodes, max(current, workers))
                why += f"; {workers} nodes would remove the wait"
            numbers["target_capacity_per_s"] = self._capacity(situation, basis, target)
            return self._sized(
                situation, "queue_bound", why, target, load.utilisation, numbers, basis
            )
        if (
            0 < signals.mean_step_s <= self.idle_step_fraction * self.target_step_s
            and signals.queue_fraction <= self.idle_queue_fraction
        ):
            why = (
                f"the mean step of {seconds_text(signals.mean_step_s)} is at most "
                f"{self.idle_step_fraction:.0%} of the {seconds_text(self.target_step_s)} target "
                f"and {signals.queue_fraction:.0%} of it was spent waiting for a worker"
            )
            if current <= self.min_nodes:
                held = [self._floor_hold(current)]
                return _change("idle", why, ScaleAction.SCALE_DOWN, current, held, numbers)
            step_goal = self.target_step_s / (1.0 + self.headroom)
            capacity_now = load.capacity_per_s
            deepest = min(current - 1, math.ceil(current * self.scale_down_factor))
            floor = max(self.min_nodes, deepest)
            smallest = smallest_satisfying(
                lambda nodes: (
                    signals.mean_step_s
                    * capacity_now
                    / max(self._capacity(situation, basis, nodes), 1e-300)
                    <= step_goal
                ),
                floor,
                current,
            )
            target = current if smallest is None else smallest
            numbers["target_capacity_per_s"] = self._capacity(situation, basis, target)
            ratio = numbers["target_capacity_per_s"] / capacity_now
            return self._sized(situation, "idle", why, target, ratio, numbers, basis)
        return _stay("balanced", "the step is balanced; hold the current size", current, numbers)

    def _sized(
        self,
        situation: _Situation,
        rule: str,
        why: str,
        target: int,
        ratio: float,
        numbers: dict[str, Any],
        basis: str,
    ) -> _Verdict:
        """A demand-sized target, with the tolerance band and the restart price applied."""
        current = situation.current
        numbers["capacity_ratio"] = bounded_or_none(ratio)
        if target == current and ratio > 1.0 + self.tolerance and current >= self.max_nodes:
            held_up = [self._ceiling_hold(current), self._startup_hold(situation)]
            return _change(rule, why, ScaleAction.SCALE_UP, current, held_up, numbers)
        if target == current or abs(ratio - 1.0) <= self.tolerance:
            suffix = (
                f"within the {self.tolerance:.0%} tolerance" if target != current else "it fits"
            )
            return _stay(rule, f"{why}; {suffix}, hold the current size", current, numbers)
        work = situation.work
        if work is not None and work.basis == basis:
            horizon = self._finish_s(situation, work, current)
        else:
            horizon = self.horizon_s
        capacity_now = self._capacity(situation, basis, current)
        capacity_target = self._capacity(situation, basis, target)
        numbers["horizon_s"] = bounded_or_none(horizon)
        if target > current:
            action = ScaleAction.SCALE_UP
            gain = horizon * (1.0 - capacity_now / capacity_target) if capacity_target > 0 else 0.0
            price, unit = self.startup_s, "seconds"
            # a stream whose work piles up must keep up: the restart is priced into its target
            held: list[HeldBy | None] = [
                self._ceiling_hold(current),
                self._startup_hold(situation),
                None if rule == "demand" else self._price_hold(gain, price, unit),
            ]
        else:
            action = ScaleAction.SCALE_DOWN
            if rule == "demand":
                gain = (current - target) * max(horizon - self.startup_s, 0.0)
            else:
                served = horizon * capacity_now
                gain = current * horizon - target * (
                    served / capacity_target if capacity_target > 0 else sys.float_info.max
                )
            price, unit = self._restart_price_node_s(current, target), "node-seconds"
            held = [
                self._floor_hold(current),
                self._final_stretch_hold(situation),
                self._price_hold(gain, price, unit),
            ]
        numbers.update({"gain": bounded_or_none(gain), "gain_unit": unit, "price": price})
        why += f"; {_verb(action)} pays {number_text(gain)} {unit} for a {number_text(price)}"
        why += f" {unit} restart over {seconds_text(horizon)}"
        return _change(rule, why, action, target, held, numbers)

    def _gated(self, situation: _Situation, verdict: _Verdict) -> _Verdict:
        """Apply the stabilisation window and the cooldowns to a verdict's change."""
        if verdict.action is ScaleAction.HOLD or verdict.target is None:
            return verdict
        held, target, why = list(verdict.held_by), verdict.target, verdict.why
        if verdict.action is ScaleAction.SCALE_DOWN and target < situation.current:
            window_start = situation.now - self.scale_down_window_s
            wanted = [r.nodes for r in situation.recent if window_start <= r.at <= situation.now]
            stabilised = max([target, *wanted])
            newest = verdict.recommended if verdict.recommended is not None else target
            within = f"within the last {seconds_text(self.scale_down_window_s)}"
            if stabilised < situation.current and newest < stabilised * (1.0 - self.tolerance):
                falling = f"the recommendations are still falling: {newest} nodes now, {stabilised}"
                held.append(HeldBy("stabilisation", f"{falling} {within}"))
            elif stabilised >= situation.current:
                held.append(
                    HeldBy("stabilisation", f"{stabilised} nodes were recommended {within}")
                )
            elif stabilised > target:
                why += f"; {stabilised} nodes, the largest size recommended {within}, is the target"
                target = stabilised
        cooldown = self._cooldown_hold(situation, verdict.action)
        if cooldown is not None:
            held.append(cooldown)
        return replace(verdict, why=why, target=target, held_by=tuple(held))

    # -- what holds a change back --------------------------------------------

    def _ceiling_hold(self, current: int) -> HeldBy | None:
        if current < self.max_nodes:
            return None
        return HeldBy("ceiling", f"already at the node ceiling of {self.max_nodes}")

    def _floor_hold(self, current: int) -> HeldBy | None:
        if current > self.min_nodes:
            return None
        return HeldBy("floor", f"already at the node floor of {self.min_nodes}")

    def _startup_hold(self, situation: _Situation) -> HeldBy | None:
        """New nodes are useless when the deadline comes before they can start."""
        time_left = situation.time_left_s
        if time_left is None or time_left > self.startup_s:
            return None
        if time_left <= 0:
            return HeldBy("deadline", "no time is left before the deadline")
        comparison = "less than" if time_left < self.startup_s else "no more than"
        return HeldBy(
            "deadline",
            f"only {seconds_text(time_left)} left before the deadline, {comparison} the "
            f"{seconds_text(self.startup_s)} new nodes need to start",
        )

    def _final_stretch_hold(self, situation: _Situation) -> HeldBy | None:
        time_left = situation.time_left_s
        stretch = self.effective_final_stretch_s
        if time_left is None or time_left > stretch:
            return None
        return HeldBy(
            "final_stretch",
            f"only {seconds_text(max(time_left, 0.0))} left before the deadline, within the "
            f"final {seconds_text(stretch)} where the job never shrinks",
        )

    def _price_hold(self, gain: float, price: float, unit: str) -> HeldBy | None:
        needed = price * (1.0 + self.resize_margin)
        if gain > 0 and gain >= needed:
            return None
        return HeldBy(
            "restart_cost",
            f"the projected gain of {number_text(max(gain, 0.0))} {unit} does not beat the "
            f"restart price of {number_text(price)} {unit} by the "
            f"{self.resize_margin:.0%} margin",
        )

    def _cooldown_hold(self, situation: _Situation, action: ScaleAction) -> HeldBy | None:
        if action is ScaleAction.SCALE_UP:
            kind, cooldown_s = "scale-up", self.cooldown_s
        else:
            kind, cooldown_s = "scale-down", self.effective_scale_down_cooldown_s
        elapsed = situation.cooldown.seconds_since_change(situation.now)
        if elapsed is None or cooldown_s <= 0 or elapsed >= cooldown_s:
            return None
        if elapsed >= 0:
            since = f"last change {seconds_text(elapsed)} ago"
        else:
            since = f"last change is recorded {seconds_text(-elapsed)} in the future"
        return HeldBy(
            "cooldown", f"in cooldown: {since}, {kind} cooldown is {seconds_text(cooldown_s)}"
        )

    # -- the decision ---------------------------------------------------------

    def _decision(self, situation: _Situation, verdict: _Verdict) -> ScaleDecision:
        current = situation.current
        wanted = current if verdict.target is None else verdict.target
        action, target, clock = ScaleAction.HOLD, current, situation.cooldown
        if verdict.action is ScaleAction.HOLD:
            reason = verdict.why
        elif verdict.held_by:
            reason = f"{verdict.why}; holding at {current}"
            if wanted != current:
                reason += f" instead of {_verb(verdict.action)} to {wanted}"
            reason += ": " + "; ".join(hold.reason for hold in verdict.held_by)
        else:
            action, target = verdict.action, wanted
            clock = CooldownClock(last_change_at=situation.now, last_action=action)
            reason = f"{verdict.why}; {_verb(action)} {current} -> {target}"
        return ScaleDecision(
            action=action,
            current_nodes=current,
            target_nodes=target,
            reason=reason,
            rule=verdict.rule,
            held_by=verdict.held_by,
            signals=situation.signals,
            thresholds=self.thresholds(),
            decided_at=situation.now,
            deadline_at=situation.deadline_at,
            time_left_s=situation.time_left_s,
            projection=self._projection(situation, verdict, wanted),
            cooldown=clock,
            recommended_nodes=verdict.recommended,
            conditions=self._conditions(situation, verdict, action is not ScaleAction.HOLD),
        )

    def _conditions(
        self, situation: _Situation, verdict: _Verdict, changed: bool
    ) -> tuple[ScaleCondition, ...]:
        """The decision's HPA-style conditions (:mod:`~elasticgrid_provider.core.conditions`)."""
        current, wanted = situation.current, verdict.target
        up = verdict.action is ScaleAction.SCALE_UP
        cooldown_until = None
        changed_at = situation.cooldown.last_change_at
        if changed_at is not None:
            cooldown_s = self.cooldown_s if up else self.effective_scale_down_cooldown_s
            cooldown_until = changed_at + cooldown_s
        return (
            able_to_scale(
                changed=changed,
                verb="scale-up" if up else "scale-down",
                current=current,
                target=current if wanted is None else wanted,
                holds=[(hold.rule, hold.reason) for hold in verdict.held_by],
                cooldown_until=cooldown_until,
            ),
            scaling_active(
                rule=verdict.rule,
                why=verdict.why,
                samples=situation.signals.samples,
                measured=situation.load is not None or situation.work is not None,
            ),
            scaling_limited(
                current=current,
                recommended=verdict.recommended,
                unclamped=self._unclamped(situation, verdict),
                min_nodes=self.min_nodes,
                max_nodes=self.max_nodes,
            ),
        )

    def _unclamped(self, situation: _Situation, verdict: _Verdict) -> int | None:
        """The size the policy would recommend without ``min_nodes`` and ``max_nodes``, asked
        only when the recommendation sits on a bound (None otherwise, or with no policy run)."""
        recommended = verdict.recommended
        if verdict.rule in ("min_samples", "bounds") or recommended is None:
            return None
        if recommended not in (self.min_nodes, self.max_nodes):
            return None
        ceiling = max(self.max_nodes, situation.current) * UNBOUNDED_FACTOR
        free = replace(self, min_nodes=1, max_nodes=ceiling)
        return free._policy(situation).recommended

    def _projection(
        self, situation: _Situation, verdict: _Verdict, wanted: int
    ) -> dict[str, Any] | None:
        """The numbers behind the decision: demand, capacity, finish times, restart price."""
        if verdict.rule == "min_samples":
            return None
        current = situation.current
        numbers: dict[str, Any] = {}
        if situation.load is not None:
            numbers.update(situation.load.to_dict())
            loss, source = situation.memory.scaling(situation.load.basis, self.scaling_loss)
            # the unit of demand and capacity: ``basis`` names the remaining work's once a
            # deadline projects a finish, which may be another
            numbers.update(
                scaling_loss=loss, scaling_source=source, demand_basis=situation.load.basis
            )
        numbers.update(verdict.numbers)
        restart = 0.0 if wanted == current else self._restart_price_node_s(current, wanted)
        numbers.update(
            current_nodes=current,
            target_nodes=wanted,
            startup_s=self.startup_s,
            restart_cost_node_s=restart,
        )
        work, time_left = situation.work, situation.time_left_s
        if work is not None and time_left is not None:
            current_finish = self._finish_s(situation, work, current)
            target_finish = current_finish
            if wanted != current:
                target_finish = self._finish_s(situation, work, wanted) + self.startup_s
            numbers.update(
                basis=work.basis,
                remaining=work.amount,
                current_finish_s=bounded_or_none(current_finish),
                target_finish_s=bounded_or_none(target_finish),
                time_left_s=time_left,
                meets_deadline=target_finish <= time_left,
            )
        return {name: bounded_or_none(value) for name, value in numbers.items()}


def _verb(action: ScaleAction) -> str:
    return "scaling up" if action is ScaleAction.SCALE_UP else "scaling down"


SCHEDULER_PARAMETERS = tuple(parameter.name for parameter in fields(ElasticScheduler))
"""The parameters of :class:`ElasticScheduler`, in order (the sensor takes each as an argument)."""


@model
class ScaleDecision(JsonModel):
    """One scale decision with everything an auditor needs to check or replay it.

    ``cooldown`` is the clock *after* this decision: store it and pass it to
    the next :meth:`ElasticScheduler.decide`. ``target_nodes`` equals
    ``current_nodes`` for a hold, is larger for ``scale_up`` and smaller for
    ``scale_down``; construction refuses anything else.
    """

    WHERE = "decision"

    action: Annotated[ScaleAction, choice(ScaleAction)]
    current_nodes: Count
    target_nodes: Count
    reason: Text
    rule: Annotated[str, choice(DecisionRule)]  # str: the rules pass their names
    signals: WindowSignals
    thresholds: dict[str, Any]
    decided_at: Finite
    cooldown: CooldownClock
    held_by: tuple[HeldBy, ...] = ()
    deadline_at: Finite | None = None
    time_left_s: Finite | None = None
    projection: dict[str, Any] | None = None
    recommended_nodes: Positive | None = None
    conditions: tuple[ScaleCondition, ...] = ()

    @field_validator("thresholds")
    @classmethod
    def _as_used(cls, thresholds: dict[str, Any]) -> dict[str, Any]:
        """The scheduler's parameters with their defaults resolved."""
        return ElasticScheduler.from_dict(thresholds).thresholds()

    @model_validator(mode="after")
    def _check_direction(self) -> ScaleDecision:
        """The action must agree with the sizes, and only a hold can be held back."""
        current, target = self.current_nodes, self.target_nodes
        direction = (target > current) - (target < current)  # 1 up, -1 down, 0 hold
        if direction != {ScaleAction.SCALE_UP: 1, ScaleAction.SCALE_DOWN: -1}.get(self.action, 0):
            raise ElasticGridError(
                f"decision action {self.action.value} does not fit current_nodes {current} "
                f"and target_nodes {target}"
            )
        if self.held_by and self.action is not ScaleAction.HOLD:
            raise ElasticGridError(
                f"decision action {self.action.value} cannot be held back; only a hold can"
            )
        return self

    @property
    def changed(self) -> bool:
        """Whether this decision changes the job's size."""
        return self.action is not ScaleAction.HOLD

    def to_json(self) -> str:
        """:meth:`to_dict` as a JSON string (strict: no NaN or infinity)."""
        return json.dumps(self.to_dict(), sort_keys=True, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> ScaleDecision:
        """Rebuild a decision from :meth:`to_json` output."""
        try:
            data = json.loads(text)
        except (TypeError, ValueError) as error:
            raise ElasticGridError(f"decision is not valid JSON: {error}") from None
        return cls.from_dict(data)
