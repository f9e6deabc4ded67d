"""Load estimation: demand, capacity and backlog measured from one window of step samples.

In tokens when every sample has them, else steps; a step's work arrived at
``time - duration_s``. *Closed loop* (batch training, or samples without ``time``): the
queue is time spent waiting for a busy worker, demand is ``capacity / (1 - queue_fraction)``.
*Open loop* (a stream: work arrives before the previous step ended, or idle gaps add up to a
fifth of the time): demand is the arrival rate since it last changed
(:func:`since_rate_change`), the backlog the newest ``queue_s`` and its trend the slope of
``queue_s`` over time. The full rules are in ``docs/policy.md``.

Pure: no Airflow, no I/O.
"""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from elasticgrid_provider.core.formatting import bounded_or_none
from elasticgrid_provider.core.policy.memory import SizeMeasurement, slope
from elasticgrid_provider.core.policy.rules import WorkBasis
from elasticgrid_provider.core.samples import StepSample

TREND_SAMPLES = 3
"""The queue's trend is read from the newest three steps: a change shows at once."""
MAX_QUEUE_TREND = 0.9
"""A queue growing this fast or faster reads as 10 times the capacity (the estimate's cap)."""
IDLE_GAP_SHARE = 0.2
"""Idle gaps (nothing queued) this share of the time mean the job waits for arriving work."""
PEAK_MIN_GAPS = 2
"""A stream's peak rate is read over at least two gaps between arrivals."""
MAX_SKIPPED_STEPS = 1000
"""A step number this far past the previous one is a restarted counter, not a gap."""
LOOP_TOLERANCE = 0.05
"""Gaps between steps within 5% of a step (and 1 ms) are bookkeeping, not idle time."""


@dataclass(frozen=True)
class LoadEstimate:
    """Demand, capacity and backlog measured from samples at one size (see the module notes)."""

    nodes: int
    samples: int
    open_loop: bool
    basis: WorkBasis
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

    def model_dump(self) -> dict[str, Any]:
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


def queue_slopes(samples: Sequence[StepSample]) -> tuple[float, ...]:
    """The slope of ``queue_s`` over the steps' end times between each successive pair; empty
    when a step has no time or two ended at once (the reporter's clock only, for replays)."""
    slopes = []
    for previous, sample in itertools.pairwise(samples):
        if previous.time is None or sample.time is None or sample.time <= previous.time:
            return ()
        slopes.append((sample.queue_s - previous.queue_s) / (sample.time - previous.time))
    return tuple(slopes)


def is_open_loop(samples: tuple[StepSample, ...]) -> bool:
    """Work arrived on its own clock: before the previous step ended, or after idle gaps
    (nothing queued) adding up to ``IDLE_GAP_SHARE`` of the time."""
    idle = busy = 0.0
    for previous, sample in itertools.pairwise(samples):
        started, ended = sample.started_at, previous.time
        if started is None or ended is None:
            return False
        slack = LOOP_TOLERANCE * sample.duration_s + 1e-3
        if started < ended - slack:
            return True  # it waited behind the previous step: a backlog
        busy += sample.duration_s
        if started > ended and sample.queue_s <= slack:
            idle += started - ended  # the job sat idle waiting for work
    return idle > 0 and idle >= IDLE_GAP_SHARE * (idle + busy)


def arrival_rate(samples: Sequence[StepSample], basis: WorkBasis) -> float:
    """Work per second between the first and the last arrival (0 without a time span).

    A gap in the step log (step numbers skipped: lines lost, not work) counts the skipped
    steps as arrived with the work of the step after them, so it does not read as a fall."""
    starts = [sample.started_at or 0.0 for sample in samples]
    span = starts[-1] - starts[0]
    if span <= 0:
        return 0.0
    work = 0.0
    for previous, sample in itertools.pairwise(samples):
        steps = sample.step - previous.step
        steps = steps if 1 <= steps <= MAX_SKIPPED_STEPS else 1
        work += steps * (sample.tokens if basis == WorkBasis.TOKENS else 1.0)
    return min(work / span, sys.float_info.max)


@dataclass(frozen=True)
class StreamDemand:
    """A stream's demand (work per second): its level since the rate last changed, and its
    peak: the highest of that level, the rate over the newest ``window_s`` of arrivals and
    what the queue's growth implies (:func:`stream_demand`)."""

    rate_per_s: float
    peak_per_s: float
    window_s: float
    newest_per_s: float = 0.0
    """The rate over the newer half of the arrivals since the rate changed (at least the
    newest gap): below the level while the window still mixes an older, higher rate."""

    @property
    def variability(self) -> float:
        """How far the level sits below the peak, as a share of the peak (0: steady)."""
        if self.peak_per_s <= 0:
            return 0.0
        return max(0.0, 1.0 - self.rate_per_s / self.peak_per_s)


def stream_demand(
    samples: Sequence[StepSample], load: LoadEstimate, window_s: float
) -> StreamDemand:
    """The demand of a stream whose ``load`` was estimated from ``samples``: the level is the
    arrival rate since it last changed; the peak adds the newest ``window_s`` of arrivals (at
    least ``PEAK_MIN_GAPS`` gaps, so one early batch is not a peak) and the queue's growth;
    ``newest_per_s`` the newer half of the arrivals since the change."""
    level = load.window_demand_per_s if load.window_demand_per_s > 0 else load.demand_per_s
    newest_start = samples[-1].started_at if samples else None
    recent: Sequence[StepSample] = ()
    if newest_start is not None:
        recent = [
            s
            for s in samples
            if s.started_at is not None and s.started_at >= newest_start - window_s
        ]
        if len(recent) <= PEAK_MIN_GAPS:
            recent = samples[-(PEAK_MIN_GAPS + 1) :]
    peak_rate = arrival_rate(recent, load.basis) if len(recent) > PEAK_MIN_GAPS else 0.0
    peak = max(level, load.demand_per_s, peak_rate)
    current = since_rate_change(samples, load.basis)
    newest = arrival_rate(current[min(len(current) // 2, len(current) - 2) :], load.basis)
    return StreamDemand(min(level, peak), peak, window_s, newest)


def work_gaps(samples: Sequence[StepSample], basis: WorkBasis) -> list[float] | None:
    """Seconds between successive arrivals per unit of work, scaled so the largest is 1 (the
    rules reading them are scale-free, and no square or sum can overflow); ``None`` without
    arrival times, or when a step's work is too small to divide by."""
    gaps = []
    for previous, sample in itertools.pairwise(samples):
        work = sample.tokens if basis == WorkBasis.TOKENS else 1.0
        if previous.started_at is None or sample.started_at is None or work <= 0:
            return None
        gap = (sample.started_at - previous.started_at) / work
        if not math.isfinite(gap):
            return None
        gaps.append(gap)
    scale = max((abs(gap) for gap in gaps), default=0.0)
    return [gap / scale for gap in gaps] if scale > 0 else gaps


def arrival_spread(samples: Sequence[StepSample], basis: WorkBasis) -> float:
    """Relative standard deviation of the arrival rate: the coefficient of variation of the
    gaps per unit of work over ``sqrt(n)`` (steady: near 0; Poisson: about ``1 / sqrt(n)``)."""
    gaps = work_gaps(samples, basis)
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


def since_rate_change(samples: Sequence[StepSample], basis: WorkBasis) -> Sequence[StepSample]:
    """The samples that arrived since the arrival rate last changed (all of them when it did not).

    The gaps per unit of work are read as exponential; their likeliest split into two rates
    is a change when it passes ``RATE_CHANGE_SIGNIFICANCE``.
    """
    gaps = work_gaps(samples, basis)
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
    basis = WorkBasis.TOKENS if all(sample.tokens > 0 for sample in ordered) else WorkBasis.STEPS
    timed = all(sample.time is not None for sample in ordered)
    open_loop = count >= 2 and ((arrivals and timed) or is_open_loop(ordered))
    # an open loop needs arrivals spread over time
    open_loop = open_loop and (ordered[-1].started_at or 0.0) > (ordered[0].started_at or 0.0)
    busy_s = math.fsum(s.active_s if open_loop else s.duration_s for s in ordered)
    if busy_s <= 0:
        return None
    steps_per_s = count / busy_s
    tokens_per_s = total_tokens / busy_s
    capacity = tokens_per_s if basis == WorkBasis.TOKENS else steps_per_s
    backlog_s = trend = 0.0
    recent_demand = window_demand = 0.0
    if open_loop:
        current = since_rate_change(ordered, basis)
        window_demand = recent_demand = arrival_rate(current, basis)
        if len(current) >= 4:  # a rise shows in the newer half first; a fall waits for all
            recent_demand = arrival_rate(current[len(current) // 2 :], basis)
        latest = ordered[-TREND_SAMPLES:]
        times = [sample.time or 0.0 for sample in latest]
        trend = slope(times, [sample.queue_s for sample in latest])
        demand = max(window_demand, recent_demand)
        newest = ordered[-1]
        if trend > 0 and newest.queue_s > LOOP_TOLERANCE * newest.duration_s:
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
