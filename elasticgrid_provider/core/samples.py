"""Step samples, the rolling window over them, and the signals it yields.

A training job reports one :class:`StepSample` per step (its duration, the time queued for a
worker, its nodes and tokens, and when it ended); the scale policy reads only the
:class:`WindowSignals` of a :class:`MetricsWindow`, the last ``size`` samples, unique by step
(a log read twice never counts a step twice). Everything is immutable and round-trips through
JSON losslessly. Every field is bounded, and NaN, infinity, negatives, booleans and strings are
refused in one sentence naming the field; :func:`screen_times` leaves out samples whose
``time`` disagrees with the check's clock. The bounds and the clock rules: docs/step-samples.md.
``queue_s`` may exceed ``duration_s`` (queueing that overlapped the previous step):
``active_s`` is then clamped at 0 and ``queue_fraction`` may exceed 1.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from dataclasses import replace
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    Field,
    ValidationInfo,
    computed_field,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.validation import (
    Count,
    JsonModel,
    NonNegative,
    Positive,
    finite,
    model,
    trusted,
    whole,
)

DEFAULT_WINDOW_SIZE = 10

# -- every sample field is bounded (docs/step-samples.md) ------------------------------
MAX_STEP = 2**53
"""The highest step number: every step up to it is exact as a float (JSON's numbers)."""
MAX_STEP_S = 7 * 86_400.0
"""The longest ``duration_s`` and ``queue_s``: a week (a longer one is a unit error)."""
MAX_NODES = 1_000_000
"""The most nodes a sample may say ran its step."""
MAX_TOKENS = 1e15
"""The most tokens one step may process."""
LATEST_TIME = 4_102_444_800.0
"""The latest ``time``: 2100-01-01T00:00:00Z (milliseconds and nanoseconds are far past it)."""
CLOCK_TOLERANCE_S = 300.0
"""How far after the check's clock a sample may say its step ended: clocks of the hosts
that run ranks and checks drift apart (NTP keeps them well within this); beyond it the
sample is left out with a reason."""
MAX_AGE_S = 30 * 86_400.0
"""How long before the check's clock a new sample may say its step ended: 30 days (a time
from 1970, or from a clock that counts from boot, is far older); beyond it the sample is
left out with a reason."""

MIN_STEP_S = 1e-6
"""The shortest non-zero ``duration_s``: a microsecond (below it, rates overflow)."""
MIN_TOKENS = 1e-3
"""The fewest non-zero ``tokens`` of a step (below it, rates underflow to zero)."""


def _zero_or_at_least(minimum: float) -> AfterValidator:
    """0, or at least ``minimum``: a value between is noise no rate can be computed from."""

    def check(value: float) -> float:
        if 0.0 < value < minimum:
            raise PydanticCustomError(
                "elasticgrid",
                "{phrase}",
                {"phrase": f"must be 0 or at least {minimum:g}, got {value!r}"},
            )
        return value

    return AfterValidator(check)


_StepNumber = Annotated[int, whole(0, MAX_STEP)]
_StepSeconds = Annotated[float, finite(0.0, MAX_STEP_S)]
_Duration = Annotated[float, finite(0.0, MAX_STEP_S), _zero_or_at_least(MIN_STEP_S)]
_Nodes = Annotated[int, whole(1, MAX_NODES)]
_Tokens = Annotated[float, finite(0.0, MAX_TOKENS), _zero_or_at_least(MIN_TOKENS)]


def _epoch_seconds(value: float) -> float:
    """A ``time`` of at most LATEST_TIME, refused naming the likely unit error."""
    if value > LATEST_TIME:
        raise PydanticCustomError(
            "elasticgrid",
            "{phrase}",
            {
                "phrase": f"must be epoch seconds before 2100 (at most {LATEST_TIME:.0f}), got "
                f"{value!r} (milliseconds or nanoseconds?)"
            },
        )
    return value


_EpochSeconds = Annotated[float, finite(0.0), AfterValidator(_epoch_seconds)]

SATURATED_QUEUE_FRACTION = 0.2  # a window whose queue fraction reaches this is saturated
STALLED_QUEUE_FRACTION = 0.6  # a window whose queue fraction reaches this is stalled
_DERIVED = ("saturated", "stalled")


@model
class StepSample(JsonModel):
    """One training step: its wall time, time queued for a worker, nodes, tokens, end time."""

    WHERE = "sample"

    step: _StepNumber
    duration_s: _Duration
    queue_s: _StepSeconds = 0.0
    nodes: _Nodes = 1
    tokens: _Tokens = 0.0
    time: _EpochSeconds | None = Field(default=None, exclude_if=lambda time: time is None)

    @property
    def active_s(self) -> float:
        """Time the step spent working rather than waiting: ``duration_s - queue_s``, at least 0."""
        return max(0.0, self.duration_s - self.queue_s)

    @property
    def started_at(self) -> float | None:
        """When the step's work became available: ``time - duration_s`` (None without a time)."""
        return None if self.time is None else self.time - self.duration_s


def _ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator``, 0 for a 0 denominator, capped so the signals stay finite."""
    return min(numerator / denominator, sys.float_info.max) if denominator > 0 else 0.0


def _total(name: str, values: Iterable[float]) -> float:
    """An exact sum, or a clear error when the samples add up beyond a float."""
    try:
        return math.fsum(values)
    except OverflowError:
        raise ElasticGridError(
            f"window sample {name} values add up to more than a float holds"
        ) from None


@model
class WindowSignals(JsonModel):
    """What the scale decision reads from a window; ``saturated``/``stalled`` derive from it."""

    WHERE = "signals"

    samples: Count = 0
    mean_step_s: NonNegative = 0.0
    mean_queue_s: NonNegative = 0.0
    mean_active_s: NonNegative = 0.0
    queue_fraction: NonNegative = 0.0
    throughput_tokens_per_s: NonNegative = 0.0
    nodes: Count = 0

    @model_validator(mode="before")
    @classmethod
    def _drop_derived(cls, data: Any) -> Any:
        """A dump's ``saturated`` and ``stalled`` are recomputed, not read."""
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if key not in _DERIVED}
        return data

    @classmethod
    def from_samples(cls, samples: Iterable[StepSample]) -> WindowSignals:
        """Derive the signals of ``samples`` (oldest first); all zero when there are none."""
        ordered = tuple(samples)
        if not ordered:
            return cls()
        count = len(ordered)
        total_duration = _total("duration_s", (sample.duration_s for sample in ordered))
        total_queue = _total("queue_s", (sample.queue_s for sample in ordered))
        total_tokens = _total("tokens", (sample.tokens for sample in ordered))
        return trusted(  # means and ratios of checked samples: finite and >= 0
            cls,
            samples=count,
            mean_step_s=total_duration / count,
            mean_queue_s=total_queue / count,
            mean_active_s=_total("active time", (sample.active_s for sample in ordered)) / count,
            queue_fraction=_ratio(total_queue, total_duration),
            throughput_tokens_per_s=_ratio(total_tokens, total_duration),
            nodes=ordered[-1].nodes,
        )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def saturated(self) -> bool:
        """At least 20% of the step time was spent waiting for a worker."""
        return self.queue_fraction >= SATURATED_QUEUE_FRACTION

    @computed_field  # type: ignore[prop-decorator]
    @property
    def stalled(self) -> bool:
        """At least 60% of the step time was spent waiting for a worker."""
        return self.queue_fraction >= STALLED_QUEUE_FRACTION


@model
class MetricsWindow(JsonModel):
    """The last ``size`` step samples, oldest first. Immutable: :meth:`add` returns a new window."""

    WHERE = "window"

    size: Positive = DEFAULT_WINDOW_SIZE
    samples: tuple[StepSample, ...] = ()

    @field_validator("samples", mode="before")
    @classmethod
    def _only_samples_in_code(cls, value: Any, info: ValidationInfo) -> Any:
        """Built in code, a window takes StepSamples only (JSON comes through model_validate)."""
        if info.context is None and isinstance(value, (tuple, list)):
            for position, sample in enumerate(value):
                if not isinstance(sample, StepSample):
                    raise ElasticGridError(
                        f"window sample {position} must be a StepSample, got {sample!r}"
                    )
        return value

    @field_validator("samples")
    @classmethod
    def _newest_per_step(cls, samples: tuple[StepSample, ...], info: ValidationInfo) -> Any:
        newest = {sample.step: index for index, sample in enumerate(samples)}  # newest wins
        if len(newest) < len(samples):
            samples = tuple(s for index, s in enumerate(samples) if newest[s.step] == index)
        return samples[-info.data.get("size", DEFAULT_WINDOW_SIZE) :]

    def add(self, *samples: StepSample) -> MetricsWindow:
        """A new window with ``samples`` appended (newest last, one per step), trimmed to ``size``."""
        return replace(self, samples=self.samples + samples)

    def signals(self) -> WindowSignals:
        """The signals of the samples currently in the window."""
        return WindowSignals.from_samples(self.samples)

    def __len__(self) -> int:
        return len(self.samples)


def screen_times(samples: Iterable[StepSample], now: float) -> tuple[list[StepSample], list[str]]:
    """The samples that ended within [``now - MAX_AGE_S``, ``now + CLOCK_TOLERANCE_S``] of the
    check's clock ``now`` (or carry no time), and one sentence for each left out."""
    kept: list[StepSample] = []
    reasons: list[str] = []
    for sample in samples:
        if sample.time is None or now - MAX_AGE_S <= sample.time <= now + CLOCK_TOLERANCE_S:
            kept.append(sample)
            continue
        if sample.time > now:
            off = f"{sample.time - now:.0f}s after the check's clock"
            bound = f"the {CLOCK_TOLERANCE_S:.0f}s tolerance (a skewed clock or a wrong unit)"
        else:
            off = f"{(now - sample.time) / 86_400:.0f} days before the check's clock"
            bound = f"{MAX_AGE_S / 86_400:.0f} days (1970, or a clock counting from boot?)"
        reasons.append(
            f"Left out step {sample.step}: its time {sample.time!r} is {off} ({now:.0f}), "
            f"beyond {bound}; it never enters the window."
        )
    return kept, reasons
