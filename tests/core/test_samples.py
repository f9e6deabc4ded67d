"""Step samples, the rolling window and its signals (means, queue fraction, throughput)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.samples import (
    CLOCK_TOLERANCE_S,
    LATEST_TIME,
    MAX_AGE_S,
    MAX_NODES,
    MAX_STEP_S,
    MAX_TOKENS,
    MIN_STEP_S,
    MIN_TOKENS,
    MetricsWindow,
    StepSample,
    WindowSignals,
    screen_times,
)

# -- StepSample ----------------------------------------------------------------


def test_sample_defaults_and_normalised_types() -> None:
    sample = StepSample(step=3.0, duration_s=2, queue_s=1, nodes=4.0, tokens=10)  # type: ignore[arg-type]
    assert sample == StepSample(3, 2.0, 1.0, 4, 10.0)
    assert type(sample.step) is int and type(sample.nodes) is int
    assert type(sample.duration_s) is float and type(sample.tokens) is float
    assert StepSample(0, 1.5) == StepSample(0, 1.5, queue_s=0.0, nodes=1, tokens=0.0)


@pytest.mark.parametrize(
    ("duration_s", "queue_s", "active_s"),
    [(10.0, 2.0, 8.0), (10.0, 0.0, 10.0), (10.0, 10.0, 0.0), (2.0, 5.0, 0.0), (0.0, 0.0, 0.0)],
)
def test_active_time_is_duration_minus_queue_never_negative(
    duration_s: float, queue_s: float, active_s: float
) -> None:
    assert StepSample(1, duration_s, queue_s).active_s == active_s


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("duration_s", math.nan, "sample duration_s must be a finite number, got nan"),
        ("duration_s", math.inf, "sample duration_s must be a finite number, got inf"),
        ("duration_s", -1.0, "sample duration_s must be at least 0, got -1.0"),
        ("duration_s", True, "sample duration_s must be a number, got True"),
        ("duration_s", "5", "sample duration_s must be a number, got '5'"),
        ("duration_s", None, "sample duration_s must be a number, got None"),
        ("queue_s", -0.5, "sample queue_s must be at least 0, got -0.5"),
        ("queue_s", -math.inf, "sample queue_s must be a finite number, got -inf"),
        ("tokens", math.nan, "sample tokens must be a finite number, got nan"),
        ("tokens", -3, "sample tokens must be at least 0, got -3"),
        ("step", -1, "sample step must be at least 0, got -1"),
        ("step", 1.5, "sample step must be a whole number, got 1.5"),
        ("step", False, "sample step must be a number, got False"),
        ("nodes", 0, "sample nodes must be at least 1, got 0"),
        ("nodes", 2.5, "sample nodes must be a whole number, got 2.5"),
        ("nodes", math.inf, "sample nodes must be a finite number, got inf"),
    ],
)
def test_bad_sample_values_are_rejected_naming_the_field(
    field: str, value: object, message: str
) -> None:
    values: dict[str, object] = {"step": 1, "duration_s": 2.0, field: value}
    with pytest.raises(ElasticGridError) as caught:
        StepSample(**values)  # type: ignore[arg-type]
    assert str(caught.value) == message


def test_sample_dict_round_trip() -> None:
    sample = StepSample(7, 3.5, 0.5, 2, 4096.0)
    assert sample.model_dump() == {
        "step": 7,
        "duration_s": 3.5,
        "queue_s": 0.5,
        "nodes": 2,
        "tokens": 4096.0,
    }
    assert StepSample.model_validate(json.loads(json.dumps(sample.model_dump()))) == sample
    assert StepSample.model_validate({"step": 1, "duration_s": 2}) == StepSample(1, 2.0)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"duration_s": 1.0}, "sample is missing the field 'step'"),
        ({"step": 1}, "sample is missing the field 'duration_s'"),
        ({"step": 1, "duration_s": 1.0, "gpu": 8}, "sample has an unknown field 'gpu'"),
        ({"step": "1", "duration_s": 1.0}, "sample step must be a number, got '1'"),
        ({"step": 1, "duration_s": "fast"}, "sample duration_s must be a number, got 'fast'"),
        ({"step": 1, "duration_s": 1.0, "queue_s": None}, "sample queue_s must be a number"),
        ({"step": 1, "duration_s": 1.0, "nodes": 0}, "sample nodes must be at least 1, got 0"),
        ({"step": 1, "duration_s": 1.0, "tokens": [1]}, "sample tokens must be a number"),
        ([1, 2.0], "sample must be a JSON object, got [1, 2.0]"),
    ],
)
def test_sample_from_json_names_the_field_at_fault(data: object, message: str) -> None:
    with pytest.raises(ElasticGridError) as caught:
        StepSample.model_validate(data)
    assert str(caught.value).startswith(message)


def test_sample_from_json_names_its_position() -> None:
    with pytest.raises(ElasticGridError) as caught:
        StepSample.model_validate({"step": 1, "duration_s": math.nan}, where="samples entry 4")
    assert str(caught.value) == "samples entry 4 duration_s must be a finite number, got nan"


# -- WindowSignals -------------------------------------------------------------


def test_signals_are_the_window_means_with_active_time_clamped_per_sample() -> None:
    window = MetricsWindow(
        samples=(
            StepSample(1, duration_s=10.0, queue_s=2.0, nodes=4, tokens=1000.0),
            StepSample(2, duration_s=20.0, queue_s=4.0, nodes=4, tokens=2000.0),
            StepSample(3, duration_s=10.0, queue_s=12.0, nodes=8, tokens=1000.0),
        )
    )
    signals = window.signals()
    assert signals.samples == 3
    assert signals.mean_step_s == pytest.approx(40.0 / 3)
    assert signals.mean_queue_s == pytest.approx(18.0 / 3)
    # Active time is clamped per sample: 8 + 16 + 0, not 40 - 18.
    assert signals.mean_active_s == pytest.approx(24.0 / 3)
    assert signals.queue_fraction == pytest.approx(18.0 / 40.0)
    assert signals.throughput_tokens_per_s == pytest.approx(4000.0 / 40.0)
    assert signals.nodes == 8  # the newest sample's size
    assert signals.saturated and not signals.stalled


def test_empty_window_signals_are_all_zero() -> None:
    signals = MetricsWindow().signals()
    assert signals == WindowSignals()
    assert signals.model_dump() == {
        "samples": 0,
        "mean_step_s": 0.0,
        "mean_queue_s": 0.0,
        "mean_active_s": 0.0,
        "queue_fraction": 0.0,
        "throughput_tokens_per_s": 0.0,
        "nodes": 0,
        "saturated": False,
        "stalled": False,
    }


def test_zero_duration_window_has_zero_fractions_not_a_division_error() -> None:
    window = MetricsWindow(samples=(StepSample(1, 0.0, 0.0, 2, 50.0), StepSample(2, 0.0, 0.0, 2)))
    signals = window.signals()
    assert signals.samples == 2
    assert signals.mean_step_s == 0.0
    assert signals.queue_fraction == 0.0
    assert signals.throughput_tokens_per_s == 0.0
    assert signals.nodes == 2


def test_the_most_extreme_samples_allowed_keep_the_signals_finite() -> None:
    extreme = StepSample(0, MIN_STEP_S, MAX_STEP_S, MAX_NODES, MAX_TOKENS, LATEST_TIME)
    signals = MetricsWindow(samples=(extreme,) * 2).signals()
    assert math.isfinite(signals.throughput_tokens_per_s) and math.isfinite(signals.queue_fraction)
    assert WindowSignals.model_validate(json.loads(json.dumps(signals.model_dump()))) == signals
    window = MetricsWindow(samples=tuple(replace(extreme, step=step) for step in range(10)))
    assert window.signals().mean_step_s == MIN_STEP_S


@pytest.mark.parametrize(
    ("queue_s", "saturated", "stalled"),
    [
        (0.0, False, False),
        (1.9, False, False),
        (2.0, True, False),
        (5.9, True, False),
        (6.0, True, True),
        (10.0, True, True),
    ],
)
def test_saturated_and_stalled_thresholds(queue_s: float, saturated: bool, stalled: bool) -> None:
    signals = MetricsWindow(samples=(StepSample(1, 10.0, queue_s),)).signals()
    assert (signals.saturated, signals.stalled) == (saturated, stalled)


def test_signals_round_trip_recomputes_the_derived_flags() -> None:
    signals = MetricsWindow(samples=(StepSample(1, 10.0, 7.0, 3, 12.0),)).signals()
    restored = WindowSignals.model_validate(json.loads(json.dumps(signals.model_dump())))
    assert restored == signals
    assert restored.stalled
    with pytest.raises(ElasticGridError, match="signals has an unknown field 'extra'"):
        WindowSignals.model_validate({**signals.model_dump(), "extra": 1})
    with pytest.raises(ElasticGridError, match="signals queue_fraction must be a finite number"):
        WindowSignals.model_validate({**signals.model_dump(), "queue_fraction": math.nan})


# -- MetricsWindow ---------------------------------------------------------------


def _samples(count: int, start: int = 0) -> tuple[StepSample, ...]:
    return tuple(StepSample(step, 1.0 + step) for step in range(start, start + count))


def test_window_keeps_the_last_size_samples() -> None:
    window = MetricsWindow(size=3, samples=_samples(5))
    assert [sample.step for sample in window.samples] == [2, 3, 4]
    assert len(window) == 3
    assert MetricsWindow().size == 10
    assert len(MetricsWindow(samples=_samples(25))) == 10


def test_a_step_already_in_the_window_is_replaced_not_counted_twice() -> None:
    window = MetricsWindow(size=4).add(*_samples(3))
    again = window.add(StepSample(1, 9.0), StepSample(3, 4.0))
    assert [(s.step, s.duration_s) for s in again.samples] == [
        (0, 1.0),
        (2, 3.0),
        (1, 9.0),
        (3, 4.0),
    ]
    same = StepSample(5, 1.0)
    assert MetricsWindow(samples=(same, same)).samples == (same,)


def test_add_returns_a_new_window_and_leaves_the_old_one_alone() -> None:
    empty = MetricsWindow(size=2)
    one = empty.add(StepSample(1, 1.0))
    three = one.add(StepSample(2, 2.0), StepSample(3, 3.0))
    assert len(empty) == 0 and len(one) == 1
    assert [sample.step for sample in three.samples] == [2, 3]
    assert three.size == 2
    assert three.signals().nodes == 1


def test_window_accepts_a_list_and_stores_a_tuple() -> None:
    window = MetricsWindow(samples=list(_samples(2)))  # type: ignore[arg-type]
    assert isinstance(window.samples, tuple)
    assert window == MetricsWindow(samples=_samples(2))


@pytest.mark.parametrize(
    ("size", "message"),
    [
        (0, "window size must be at least 1, got 0"),
        (-3, "window size must be at least 1, got -3"),
        (1.5, "window size must be a whole number, got 1.5"),
        (True, "window size must be a number, got True"),
        (math.nan, "window size must be a finite number, got nan"),
        (math.inf, "window size must be a finite number, got inf"),
    ],
)
def test_bad_window_size_is_rejected(size: object, message: str) -> None:
    with pytest.raises(ElasticGridError) as caught:
        MetricsWindow(size=size)  # type: ignore[arg-type]
    assert str(caught.value) == message


def test_window_rejects_things_that_are_not_samples() -> None:
    with pytest.raises(ElasticGridError, match="window sample 1 must be a StepSample"):
        MetricsWindow(samples=(StepSample(1, 1.0), {"step": 2, "duration_s": 1.0}))  # type: ignore[arg-type]
    with pytest.raises(ElasticGridError, match="window samples must be a list"):
        MetricsWindow(samples="abc")  # type: ignore[arg-type]


def test_window_json_round_trip_is_lossless() -> None:
    window = MetricsWindow(
        size=4,
        samples=(StepSample(1, 0.1, 0.03, 2, 17.25), StepSample(2, 1 / 3, 0.0, 3, 0.0)),
    )
    data = window.model_dump()
    assert data == {"size": 4, "samples": [sample.model_dump() for sample in window.samples]}
    assert MetricsWindow.model_validate(json.loads(json.dumps(data))) == window
    assert MetricsWindow.model_validate({"samples": []}) == MetricsWindow()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("[]", "window must be a JSON object, got '[]'"),
        ({"size": 3, "items": []}, "window has an unknown field 'items'"),
        ({"size": 3, "samples": {"step": 1}}, "window samples must be a list"),
        ({"size": 0, "samples": []}, "window size must be at least 1, got 0"),
        (
            {"samples": [{"step": 1, "duration_s": 1.0}, {"step": 2, "duration_s": math.nan}]},
            "window samples.1.duration_s must be a finite number, got nan",
        ),
        ({"samples": [{"step": 1}]}, "window samples.0 is missing the field 'duration_s'"),
        ({"samples": [7]}, "window samples.0 must be a JSON object, got 7"),
    ],
)
def test_window_from_json_names_the_entry_and_field(data: object, message: str) -> None:
    with pytest.raises(ElasticGridError) as caught:
        MetricsWindow.model_validate(data)
    assert str(caught.value).startswith(message)


samples_strategy = st.builds(
    StepSample,
    step=st.integers(0, 10**6),
    duration_s=st.just(0.0) | st.floats(MIN_STEP_S, 1e4),
    queue_s=st.floats(0, 1e4),
    nodes=st.integers(1, 4096),
    tokens=st.just(0.0) | st.floats(MIN_TOKENS, 1e9),
)


@given(size=st.integers(1, 20), samples=st.lists(samples_strategy, max_size=40))
def test_any_window_keeps_the_newest_sample_of_each_step_and_round_trips(
    size: int, samples: list[StepSample]
) -> None:
    window = MetricsWindow(size=size).add(*samples)
    # one sample per step: the newest one of each step, in the order they came
    newest = [s for i, s in enumerate(samples) if all(t.step != s.step for t in samples[i + 1 :])]
    assert window.samples == tuple(newest[-size:])
    assert len({sample.step for sample in window.samples}) == len(window)
    assert MetricsWindow.model_validate(json.loads(json.dumps(window.model_dump()))) == window
    signals = window.signals()
    assert signals.samples == len(window)
    assert signals.queue_fraction >= 0 and signals.throughput_tokens_per_s >= 0
    assert 0 <= signals.mean_active_s <= signals.mean_step_s + 1e-9 * max(1.0, signals.mean_step_s)
    assert WindowSignals.model_validate(json.loads(json.dumps(signals.model_dump()))) == signals


# -- every sample field is bounded; times are checked against the check's clock -----------


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (
            "time",
            1e300,
            "sample time must be epoch seconds before 2100 (at most 4102444800), "
            "got 1e+300 (milliseconds or nanoseconds?)",
        ),
        ("time", 1.7e18, "got 1.7e+18 (milliseconds or nanoseconds?)"),  # nanoseconds
        ("time", 1.7e12, "got 1700000000000.0 (milliseconds or nanoseconds?)"),
        ("time", -1.0, "sample time must be at least 0, got -1.0"),
        ("duration_s", 1e308, "sample duration_s must be at most 604800, got 1e+308"),
        ("queue_s", 1e308, "sample queue_s must be at most 604800, got 1e+308"),
        ("duration_s", 5e-324, "sample duration_s must be 0 or at least 1e-06, got 5e-324"),
        ("tokens", 1e300, "sample tokens must be at most 1e+15, got 1e+300"),
        ("tokens", 1e-9, "sample tokens must be 0 or at least 0.001, got 1e-09"),
        ("nodes", 10**7, "sample nodes must be at most 1000000, got 10000000"),
        ("step", 2**60, f"sample step must be at most {2**53}, got {2**60}"),
    ],
)
def test_every_sample_field_is_bounded(field: str, value: object, message: str) -> None:
    data = {"step": 1, "duration_s": 2.0, field: value}
    with pytest.raises(ElasticGridError) as caught:
        StepSample.model_validate(data)
    assert message in str(caught.value)
    assert str(caught.value).startswith(f"sample {field} must be")


NOW = 1_767_225_600.0  # the check's clock


@pytest.mark.parametrize(
    ("time", "why"),
    [
        (NOW + 3600.0, "3600s after the check's clock (1767225600), beyond the 300s tolerance"),
        (0.0, "20454 days before the check's clock (1767225600), beyond 30 days"),  # 1970
        (86_400.0 * 3, "20451 days before"),  # a clock that counts from boot: 3 days up
        (NOW - 31 * 86_400.0, "31 days before"),
    ],
)
def test_times_far_from_the_checks_clock_are_left_out_with_a_reason(time: float, why: str) -> None:
    good = [StepSample(step, 1.0, time=NOW - 10.0 + step) for step in range(3)]
    bad = StepSample(7, 1.0, time=time)
    kept, reasons = screen_times([good[0], bad, *good[1:]], NOW)
    assert kept == good
    assert len(reasons) == 1
    assert reasons[0].startswith(f"Left out step 7: its time {time!r} is ")
    assert why in reasons[0] and reasons[0].endswith("it never enters the window.")


def test_times_within_the_tolerance_and_samples_without_a_time_are_kept() -> None:
    samples = [
        StepSample(0, 1.0),
        StepSample(1, 1.0, time=NOW + CLOCK_TOLERANCE_S),
        StepSample(2, 1.0, time=NOW - MAX_AGE_S),
    ]
    assert screen_times(samples, NOW) == (samples, [])
