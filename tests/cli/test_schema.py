"""``elasticgrid schema state|decision``: the published JSON Schemas, checked against real documents."""

from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import pytest

from elasticgrid_provider.cli import main
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.samples import StepSample
from elasticgrid_provider.core.state import ScaleState


def _printed_schema(capsys: pytest.CaptureFixture[str], kind: str) -> dict:
    code = main(["schema", kind])
    captured = capsys.readouterr()
    assert code == 0 and captured.err == ""
    return json.loads(captured.out)


def _advanced_state() -> tuple[ScaleState, dict]:
    samples = [StepSample(step, 40.0, 20.0, 8, 100.0, 1000.0 + 40 * step) for step in range(6)]
    state, record = ScaleState("llm").advance(
        ScalePolicy(max_nodes=64), samples, current_nodes=8, now=1300.0
    )
    return state, record.model_dump()


def test_the_state_schema_validates_a_real_state(capsys: pytest.CaptureFixture[str]) -> None:
    schema = _printed_schema(capsys, "state")
    state, _ = _advanced_state()
    document = json.loads(json.dumps(state.model_dump()))
    jsonschema.validate(document, schema)
    assert document["schema_version"] == 2
    # a newer minor's field is allowed (core/records.py); another major is not
    jsonschema.validate({**document, "surprise": 1, "schema_minor": 3}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**document, "schema_version": 3}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**document, "revision": "3"}, schema)


def test_the_decision_schema_validates_a_real_record(capsys: pytest.CaptureFixture[str]) -> None:
    schema = _printed_schema(capsys, "decision")
    _, record = _advanced_state()
    jsonschema.validate(json.loads(json.dumps(record)), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**record, "rule": "vibes"}, schema)


def test_an_unknown_kind_is_a_usage_error() -> None:
    finished = subprocess.run(
        [sys.executable, "-m", "elasticgrid_provider", "schema", "manifest"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert finished.returncode == 2
    assert "invalid choice: 'manifest'" in finished.stderr
    assert "Traceback" not in finished.stderr
