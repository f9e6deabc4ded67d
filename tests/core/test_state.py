"""ScaleState read back from its stored JSON: cursors of both kinds, and documents refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.samples import MetricsWindow, StepSample
from elasticgrid_provider.core.state import ScaleState
from elasticgrid_provider.core.step_log import LogCursor


def stored(**fields: Any) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "job_name": "llm",
        "revision": 2,
        "current_nodes": 4,
        "window": {"size": 3, "samples": []},
        "cursors": {},
        "cooldown": {},
        "history": [],
        **fields,
    }


def test_cursors_of_both_kinds_round_trip_through_json() -> None:
    state = (
        ScaleState("llm", window=MetricsWindow(3, (StepSample(1, 1.0),)))
        .with_cursor("/jobs/llm--a/steps.jsonl", LogCursor(120, 7, "ab" * 16, 41))
        .with_cursor("samples argument", 6)
    )
    again = ScaleState.model_validate(json.loads(json.dumps(state.model_dump())), job_name="llm")
    assert again == state
    assert again.log_cursor("/jobs/llm--a/steps.jsonl") == LogCursor(120, 7, "ab" * 16, 41)
    assert again.cursor("samples argument") == 6
    assert again.cursor("/jobs/llm--a/steps.jsonl") == 120
    assert again.log_cursor("/never/read") is None


def test_a_bare_byte_offset_from_an_older_state_is_a_cursor_without_identity() -> None:
    state = ScaleState.model_validate(stored(cursors={"/jobs/llm--a/steps.jsonl": 512}))
    assert state.log_cursor("/jobs/llm--a/steps.jsonl") == LogCursor(offset=512)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"history": "abc"}, "scale state history must be a list of decisions, got 'abc'"),
        ({"history": {"a": 1}}, "scale state history must be a list of decisions, got {'a': 1}"),
        ({"history": [1]}, "scale state history entry 0 must be a JSON object, got 1"),
        ({"job_name": ""}, "scale state job_name must not be empty, got ''"),
        ({"job_name": 7}, "scale state job_name must be a string, got 7"),
        ({"current_nodes": 0}, "scale state current_nodes must be at least 1, got 0"),
        ({"revision": -1}, "scale state revision must be at least 0, got -1"),
        ({"skipped_lines": "x"}, "scale state skipped_lines must be a number, got 'x'"),
        ({"updated_at": float("nan")}, "scale state updated_at must be a finite number, got nan"),
        ({"cursors": []}, "scale state cursors must be a JSON object, got []"),
        ({"cursors": {"p": "x"}}, "scale state cursor 'p' must be a number, got 'x'"),
        ({"cursors": {"p": {"offset": 1, "head": 3}}}, "scale state cursor 'p' head must be"),
        ({"window": "w"}, "scale state window must be a JSON object, got 'w'"),
    ],
)
def test_a_malformed_state_is_refused_in_one_sentence(fields: dict, message: str) -> None:
    with pytest.raises(ElasticGridError) as caught:
        ScaleState.model_validate(stored(**fields))
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_a_state_of_another_job_is_refused_when_the_job_is_named() -> None:
    with pytest.raises(ElasticGridError) as caught:
        ScaleState.model_validate(stored(job_name="other"), job_name="llm")
    assert str(caught.value) == (
        "scale state job_name must be 'llm' (the job checked), got 'other'"
    )
    assert (
        ScaleState.model_validate(stored(job_name="other")).job_name == "other"
    )  # replay: any job


def test_a_huge_wrong_history_is_quoted_short() -> None:
    with pytest.raises(ElasticGridError) as caught:
        ScaleState.model_validate(stored(history="x" * 100_000))
    assert len(str(caught.value)) < 200
