"""Step samples, the rolling window over them, and the signals it yields.

A training job reports one :class:`StepSample` per step: how long the step
took, how much of that was spent queued waiting for a worker, how many nodes
ran it and how many tokens it processed. The scale decision never looks at a
single sample; it reads the :class:`WindowSignals` of a :class:`MetricsWindow`,
the last ``size`` samples (SPEC 4.1).

Design notes:

* Every value is checked where it enters: a sample refuses NaN, infinity,
  negatives, booleans and strings with one sentence naming the field (the
  0.1.0 defect 4.6.6 let NaN durations through as "balanced").
* Everything is immutable. ``MetricsWindow.add`` returns a new window, so a
  window read from an Airflow Variable can be extended and written back
  without aliasing surprises, and a recorded window replays exactly.
* ``to_dict``/``from_dict`` are lossless through ``json``; ``from_dict``
  names the entry and field at fault (``window sample 3 duration_s ...``).
* Samples in a window are unique by step: a sample whose step is already in
  the window replaces the older one (a step log read twice, or written by
  two writers, never counts a step twice).
* ``time`` (optional) is when the step ended, in epoch seconds, as the
  step reporter writes it. Old logs and hand-written samples may lack it;
  the scheduler then times the samples by their durations. The scheduler
  reads arrival rates and idle gaps from these timestamps.
* ``queue_s`` may exceed ``duration_s`` (a sample can report queueing that
  overlapped the previous step); ``active_s`` is clamped at 0 and
  ``queue_fraction`` may then exceed 1, as in 0.1.0.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.validation import (
    check_integer,
    check_mapping,
    check_number,
    reject_unknown_keys,
)

SAMPLE_FIELDS = frozenset({"step", "duration_s", "queue_s", "nodes", "tokens", "time"})
REQUIRED_SAMPLE_FIELDS = ("step", "duration_s")
WINDOW_FIELDS = frozenset({"size", "samples"})
DEFAULT_WINDOW_SIZE = 10

SATURATED_QUEUE_FRACTION = 0.2
"""A window whose queue fraction reaches this is ``saturated``."""
STALLED_QUEUE_FRACTION = 0.6
"""A window whose queue fraction reaches this is ``stalled``."""
_SIGNAL_NUMBERS = (
    "mean_step_s",
    "mean_queue_s",
    "mean_active_s",
    "queue_fraction",
    "throughput_tokens_per_s",
)
_SIGNAL_FIELDS = frozenset({"samples", "nodes", *_SIGNAL_NUMBERS})


def _checked_sample_fields(
    label: str,
    step: Any,
    duration_s: Any,
    queue_s: Any,
    nodes: Any,
    tokens: Any,
    time: Any = None,
) -> dict[str, Any]:
    """Validate and normalise the sample fields, naming ``label`` in errors."""
    return {
        "step": check_integer(f"{label} step", step, minimum=0),
        "duration_s": check_number(f"{label} duration_s", duration_s),
        "queue_s": check_number(f"{label} queue_s", queue_s),
        "nodes": check_integer(f"{label} nodes", nodes, minimum=1),
        "tokens": check_number(f"{label} tokens", tokens),
        "time": None if time is None else check_number(f"{label} time", time),
    }


@dataclass(frozen=True)
class StepSample:
    """One training step: its wall time, time queued for a worker, nodes, tokens, end time."""

    step: int
    duration_s: float
    queue_s: float = 0.0
    nodes: int = 1
    tokens: float = 0.0
    time: float | None = None

    def __post_init__(self) -> None:
        checked = _checked_sample_fields(
            "sample", self.step, self.duration_s, self.queue_s, self.nodes, self.tokens, self.time
        )
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    @property
    def active_s(self) -> float:
        """Time the step spent working rather than waiting: ``duration_s - queue_s``, at least 0."""
        return max(0.0, self.duration_s - self.queue_s)

    @property
    def started_at(self) -> float | None:
        """When the step's work became available: ``time - duration_s`` (None without a time)."""
        return None if self.time is None else self.time - self.duration_s

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (``time`` only when known); the inverse of :meth:`from_dict`."""
        data: dict[str, Any] = {
            "step": self.step,
            "duration_s": self.duration_s,
            "queue_s": self.queue_s,
            "nodes": self.nodes,
            "tokens": self.tokens,
        }
        if self.time is not None:
            data["time"] = self.time
        return data

    @classmethod
    def from_dict(cls, data: Any, *, where: str = "sample") -> StepSample:
        """Build a sample from a JSON object; ``where`` names it in errors (e.g. "sample 3")."""
        check_mapping(where, data)
        reject_unknown_keys(where, data, SAMPLE_FIELDS)
        for required in REQUIRED_SAMPLE_FIELDS:
            if required not in data:
                raise ElasticGridError(f"{where} is missing the field {required!r}")
        checked = _checked_sample_fields(
            where,
            data["step"],
            data["duration_s"],
            data.get("queue_s", 0.0),
            data.get("nodes", 1),
            data.get("tokens", 0.0),
            data.get("time"),
        )
        return cls(**checked)


def _ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator``: 0 when the denominator is 0, capped at the largest float.

    The cap only matters for absurd inputs (a subnormal duration), and keeps
    the signals finite, JSON-safe numbers.
    """
    return min(numerator / denominator, sys.float_info.max) if denominator > 0 else 0.0


def _total(name: str, values: Iterable[float]) -> float:
    """An exact sum, or a clear error when the samples add up beyond a float."""
    try:
        return math.fsum(values)
    except OverflowError:
        raise ElasticGridError(
            f"window sample {name} values add up to more than a float holds"
        ) from None


@dataclass(frozen=True)
class WindowSignals:
    """What the scale decision reads from a window: means, fractions, throughput, size.

    ``saturated`` and ``stalled`` are derived from ``queue_fraction`` so they
    can never disagree with it.
    """

    samples: int = 0
    mean_step_s: float = 0.0
    mean_queue_s: float = 0.0
    mean_active_s: float = 0.0
    queue_fraction: float = 0.0
    throughput_tokens_per_s: float = 0.0
    nodes: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "samples", check_integer("signals samples", self.samples))
        object.__setattr__(self, "nodes", check_integer("signals nodes", self.nodes))
        for name in _SIGNAL_NUMBERS:
            object.__setattr__(self, name, check_number(f"signals {name}", getattr(self, name)))

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
        return cls(
            samples=count,
            mean_step_s=total_duration / count,
            mean_queue_s=total_queue / count,
            mean_active_s=_total("active time", (sample.active_s for sample in ordered)) / count,
            queue_fraction=_ratio(total_queue, total_duration),
            throughput_tokens_per_s=_ratio(total_tokens, total_duration),
            nodes=ordered[-1].nodes,
        )

    @property
    def saturated(self) -> bool:
        """At least 20% of the step time was spent waiting for a worker."""
        return self.queue_fraction >= SATURATED_QUEUE_FRACTION

    @property
    def stalled(self) -> bool:
        """At least 60% of the step time was spent waiting for a worker."""
        return self.queue_fraction >= STALLED_QUEUE_FRACTION

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON, including the derived ``saturated`` and ``stalled`` flags."""
        return {
            "samples": self.samples,
            "mean_step_s": self.mean_step_s,
            "mean_queue_s": self.mean_queue_s,
            "mean_active_s": self.mean_active_s,
            "queue_fraction": self.queue_fraction,
            "throughput_tokens_per_s": self.throughput_tokens_per_s,
            "nodes": self.nodes,
            "saturated": self.saturated,
            "stalled": self.stalled,
        }

    @classmethod
    def from_dict(cls, data: Any) -> WindowSignals:
        """Rebuild signals from :meth:`to_dict` output; the derived flags are recomputed."""
        check_mapping("signals", data)
        reject_unknown_keys("signals", data, _SIGNAL_FIELDS | {"saturated", "stalled"})
        return cls(**{name: value for name, value in data.items() if name in _SIGNAL_FIELDS})


@dataclass(frozen=True)
class MetricsWindow:
    """The last ``size`` step samples, oldest first. Immutable: :meth:`add` returns a new window."""

    size: int = DEFAULT_WINDOW_SIZE
    samples: tuple[StepSample, ...] = ()

    def __post_init__(self) -> None:
        size = check_integer("window size", self.size, minimum=1)
        if not isinstance(self.samples, (tuple, list)):
            raise ElasticGridError(f"window samples must be a list, got {self.samples!r}")
        samples = tuple(self.samples)
        for position, sample in enumerate(samples):
            if not isinstance(sample, StepSample):
                raise ElasticGridError(
                    f"window sample {position} must be a StepSample, got {sample!r}"
                )
        newest = {sample.step: index for index, sample in enumerate(samples)}  # newest wins
        if len(newest) < len(samples):
            samples = tuple(s for index, s in enumerate(samples) if newest[s.step] == index)
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "samples", samples[-size:])

    def add(self, *samples: StepSample) -> MetricsWindow:
        """A new window with ``samples`` appended (newest last, one per step), trimmed to ``size``."""
        return replace(self, samples=self.samples + samples)

    def signals(self) -> WindowSignals:
        """The signals of the samples currently in the window."""
        return WindowSignals.from_samples(self.samples)

    def __len__(self) -> int:
        return len(self.samples)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON ``{"size": ..., "samples": [...]}``; the inverse of :meth:`from_dict`."""
        return {"size": self.size, "samples": [sample.to_dict() for sample in self.samples]}

    @classmethod
    def from_dict(cls, data: Any) -> MetricsWindow:
        """Rebuild a window from :meth:`to_dict` output (for example an Airflow Variable)."""
        check_mapping("window", data)
        reject_unknown_keys("window", data, WINDOW_FIELDS)
        entries = data.get("samples", [])
        if not isinstance(entries, list):
            raise ElasticGridError(f"window samples must be a list, got {entries!r}")
        samples = tuple(
            StepSample.from_dict(entry, where=f"window sample {position}")
            for position, entry in enumerate(entries)
        )
        return cls(size=data.get("size", DEFAULT_WINDOW_SIZE), samples=samples)
