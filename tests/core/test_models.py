"""The pydantic model layer: strict fields, the one error adapter, versions, enums, schemas."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import jsonschema
import pytest
from pydantic import TypeAdapter, ValidationError

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.job import (
    MANIFEST_LAYOUT,
    JobManifest,
    JobStatus,
    PartRecord,
    overall_status,
)
from elasticgrid_provider.core.launch_spec import LaunchOptions, RecoveryMode
from elasticgrid_provider.core.placement import Assignment, Placement
from elasticgrid_provider.core.planner import Prefer
from elasticgrid_provider.core.policy.decision import CooldownClock, Recommendation
from elasticgrid_provider.core.policy.memory import SizeMeasurement
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.policy.rules import DecisionRule, HoldRule, ScaleAction
from elasticgrid_provider.core.providers import Provider
from elasticgrid_provider.core.samples import MetricsWindow, StepSample, WindowSignals
from elasticgrid_provider.core.schemas import json_schema
from elasticgrid_provider.core.settings import grid_settings
from elasticgrid_provider.core.state import ScaleState
from elasticgrid_provider.core.step_log import LogCursor
from elasticgrid_provider.core.validation import Positive, model_error

AWS = Provider("aws", max_nodes=8, cost_per_node_hour=3.0, region="us-east-1", engine="ec2")


def _manifest_dict(**changes: Any) -> dict[str, Any]:
    placement = Placement((Assignment(AWS, 2),))
    part = PartRecord("llm--aws", "aws", "aws/us-east-1", 2, 0, "/jobs/llm/aws.json")
    manifest = JobManifest(
        job_name="llm",
        launch_id="20261202T000000Z-ab12",
        launched_at="2026-12-02T00:00:00+00:00",
        placement=placement,
        world_size=2,
        procs_per_node=1,
        rendezvous="dir:/jobs/llm/rendezvous",
        run="python train.py",
        parts=(part,),
    )
    return {**manifest.model_dump(), **changes}


def _message(build: Any) -> str:
    with pytest.raises(ElasticGridError) as caught:
        build()
    return str(caught.value)


# -- strict fields ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: StepSample(1, True), "sample duration_s must be a number, got True"),
        (
            lambda: Provider("aws", max_nodes=True, cost_per_node_hour=1.0),
            "provider 'aws' max_nodes must be a number, got True",
        ),
        (lambda: ScalePolicy(cooldown_s=False), "cooldown_s must be a number, got False"),
        (lambda: Recommendation(True, 2), "recommendation at must be a number, got True"),
    ],
)
def test_a_bool_is_not_a_number(build: Any, message: str) -> None:
    assert _message(build) == message


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: StepSample.model_validate({"step": "2", "duration_s": 1.0}),
            "sample step must be a number, got '2'",
        ),
        (
            lambda: MetricsWindow.model_validate({"size": "2"}),
            "window size must be a number, got '2'",
        ),
        (
            lambda: ScaleState("llm", current_nodes="2"),  # type: ignore[arg-type]
            "scale state current_nodes must be a number, got '2'",
        ),
        (
            lambda: ScaleState("llm", cursors={"a": {"offset": "2"}}),
            "scale state cursor 'a' offset must be a number, got '2'",
        ),
    ],
)
def test_a_numeric_string_is_not_an_int(build: Any, message: str) -> None:
    assert _message(build) == message


def test_whole_floats_still_count_as_ints() -> None:
    assert StepSample.model_validate({"step": 2.0, "duration_s": 1}).step == 2
    assert type(StepSample.model_validate({"step": 2.0, "duration_s": 1}).step) is int


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_refused(bad: float) -> None:
    signals = WindowSignals().model_dump()
    assert _message(lambda: WindowSignals.model_validate({**signals, "queue_fraction": bad})) == (
        f"signals queue_fraction must be a finite number, got {bad!r}"
    )
    assert _message(lambda: CooldownClock(last_change_at=bad)).startswith(
        "cooldown last_change_at must be a finite number"
    )
    assert _message(lambda: SizeMeasurement(2, bad, 0.0)).startswith(
        "measurement steps_per_node_s must be a finite number"
    )


@pytest.mark.parametrize(
    ("load", "data", "message"),
    [
        (StepSample.model_validate, {"step": 1, "duration_s": 1.0, "gpu": 8}, "sample"),
        (ScalePolicy.model_validate, {"deadline_s": 1}, "policy"),
    ],
)
def test_an_unknown_field_of_an_input_is_refused(
    load: Any, data: dict[str, Any], message: str
) -> None:
    unknown = next(key for key in data if key in ("gpu", "deadline_s"))
    assert _message(lambda: load(data)) == f"{message} has an unknown field {unknown!r}"


@pytest.mark.parametrize(
    ("load", "data"),
    [
        (CooldownClock.model_validate, {"since": 1}),
        (LogCursor.model_validate, {"offset": 1, "size": 2}),
        (ScaleState.model_validate, {"job_name": "a", "x": 1, "schema_version": 2}),
        (JobManifest.model_validate, _manifest_dict(extra=1)),
    ],
)
def test_an_unknown_field_of_a_record_is_kept(load: Any, data: dict[str, Any]) -> None:
    """A newer minor's field (core/records.py; tests/core/test_records.py fuzzes it)."""
    assert data.items() <= load(data).model_dump().items()


def test_models_are_frozen_and_replace_revalidates() -> None:
    sample = StepSample(1, 2.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        sample.step = 3  # type: ignore[misc]
    with pytest.raises(ElasticGridError, match="sample queue_s must be at least 0, got -1"):
        dataclasses.replace(sample, queue_s=-1)


# -- the one adapter --------------------------------------------------------------------


def test_the_adapter_names_the_dotted_field_path_and_the_value() -> None:
    state = ScaleState("llm", window=MetricsWindow(3, (StepSample(1, 1.0),))).model_dump()
    state["window"]["samples"][0]["queue_s"] = -2.5
    message = _message(lambda: ScaleState.model_validate(state))
    assert message == "scale state window.samples.0.queue_s must be at least 0, got -2.5"


def test_the_adapter_turns_pydantic_s_own_errors_into_one_sentence() -> None:
    with pytest.raises(ValidationError) as caught:
        TypeAdapter(dict[str, Positive]).validate_python({"a": 0})
    assert str(model_error(caught.value, "grid")) == "grid a must be at least 1, got 0"
    with pytest.raises(ValidationError) as caught:
        TypeAdapter(list[int]).validate_python("abc")
    error = model_error(caught.value, "sizes")
    assert isinstance(error, ElasticGridError)
    assert str(error) == "sizes must be a list, got 'abc'"
    assert "\n" not in str(error)


def test_loading_never_leaks_key_type_or_attribute_errors() -> None:
    for bad in (None, 3, "x", [], {"job_name": None}, {"job_name": "a", "window": []}):
        with pytest.raises(ElasticGridError):
            ScaleState.model_validate(
                bad if not isinstance(bad, dict) else {**bad, "schema_version": 2}
            )
    for bad in (None, [], {"placement": 3}, _manifest_dict(parts=[{"name": "x"}])):
        with pytest.raises(ElasticGridError):
            JobManifest.model_validate(bad)


# -- versions ---------------------------------------------------------------------------


def test_a_manifest_without_a_version_loads_as_version_1() -> None:
    data = _manifest_dict()
    assert data["schema_version"] == MANIFEST_LAYOUT.major == 1
    del data["schema_version"]
    for older in ("state", "down_reason", "fingerprint_salt", "fingerprints"):
        del data[older]
    manifest = JobManifest.model_validate(json.loads(json.dumps(data)))
    assert manifest.state == "running" and manifest.fingerprints == {}
    assert manifest.model_dump()["schema_version"] == 1


def test_a_newer_manifest_is_refused_in_one_sentence() -> None:
    data = _manifest_dict(schema_version=2, new_field="x")
    assert _message(lambda: JobManifest.model_validate(data)) == (
        "job manifest schema_version 2 was written by a newer release of elasticgrid-provider "
        "than this worker's, which reads 1.0: upgrade elasticgrid-provider here; the job "
        "manifest is left as it is"
    )


def test_a_version_1_state_still_migrates() -> None:
    data = ScaleState("llm").model_dump()
    data.update(schema_version=1)
    del data["capacity"], data["recent"]
    assert ScaleState.model_validate(data, job_name="llm") == ScaleState("llm")


# -- enums ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "member",
    [
        JobStatus.DONE,
        DecisionRule.QUEUE_BOUND,
        HoldRule.COOLDOWN,
        ScaleAction.SCALE_DOWN,
        Prefer.BALANCE,
        RecoveryMode.RESTART,
    ],
)
def test_enums_round_trip_through_json_as_their_words(member: Any) -> None:
    word = member.value
    assert json.loads(json.dumps({"x": member})) == {"x": word}
    assert member == word and f"{member}" == word and str(member) == word
    assert type(member)(json.loads(json.dumps(member))) is member


def test_enum_fields_dump_words_and_load_them_back() -> None:
    clock = CooldownClock(1.0, ScaleAction.SCALE_UP)
    assert json.dumps(clock.model_dump()) == '{"last_change_at": 1.0, "last_action": "scale_up"}'
    assert CooldownClock.model_validate(json.loads(json.dumps(clock.model_dump()))).last_action is (
        ScaleAction.SCALE_UP
    )
    part = PartRecord("a--b", "b", "b", 1, 0, "/s.json", status=JobStatus.DONE)
    assert PartRecord.model_validate(json.loads(json.dumps(part.model_dump()))) == part
    assert LaunchOptions("x", recovery={"mode": RecoveryMode.NONE}).recovery == {"mode": "none"}


def test_job_status_knows_the_terminal_ones() -> None:
    assert [status.value for status in JobStatus if status.is_terminal] == [
        "done",
        "failed",
        "stopped",
    ]
    assert overall_status(["done", "running"]) is JobStatus.RUNNING
    assert overall_status(["done", "done"]).is_terminal


# -- schemas and settings ---------------------------------------------------------------


def test_the_state_schema_validates_a_real_state_dump() -> None:
    samples = [StepSample(step, 30.0, 12.0, 4, 50.0, 100.0 + 30 * step) for step in range(5)]
    state, _ = (
        ScaleState("llm")
        .with_cursor("/jobs/llm--a/steps.jsonl", LogCursor(10, 3, "ab", 4))
        .advance(ScalePolicy(), samples, current_nodes=4, now=400.0)
    )
    schema = json_schema("state")
    jsonschema.validate(json.loads(json.dumps(state.model_dump())), schema)
    assert {"job_name", "schema_version"} <= set(schema["required"]) | set(schema["properties"])
    with pytest.raises(ElasticGridError, match="schema kind must be one of 'state', 'decision'"):
        json_schema("manifest")


def test_connection_settings_parse_without_airflow() -> None:
    extra = {
        "providers": json.dumps([AWS.model_dump()]),
        "max_spot_fraction": "0.5",
        "prefer": "balance",
    }
    settings = grid_settings(extra, "grid")
    assert settings.providers == (AWS,) and settings.max_spot_fraction == 0.5
    assert settings.prefer == Prefer.BALANCE and settings.source == "connection 'grid'"
    assert grid_settings(None, "grid").source == "the built-in default grid"
    # a providers argument that rendered empty leaves the grid to the connection
    for empty in ("", "  ", []):
        assert grid_settings(extra, "grid", empty).providers == (AWS,)
    assert (
        grid_settings(extra, "grid", [AWS.model_dump()]).source == "the task's providers argument"
    )
    # a grid that routes AWS to iroh-tinker's own engine is refused where it is read
    iroh_aws = {"providers": [{**AWS.model_dump(), "engine": "aws"}]}
    assert _message(lambda: grid_settings(iroh_aws, "grid")) == (
        "connection 'grid' field providers: provider 'aws' would launch on iroh-tinker's own AWS "
        "engine (engine 'aws'; a provider's engine is its name unless set), which leaves "
        "instances running when a launch fails and is never used: set its engine to 'ec2' "
        "(docs/clouds.md), or to 'ssh' for machines reached over SSH"
    )
    assert _message(lambda: grid_settings({"max_spot_fraction": "1.5"}, "grid")) == (
        "connection 'grid' field max_spot_fraction must be at most 1, got 1.5"
    )
    assert _message(lambda: grid_settings({"prefer": "fast"}, "grid")) == (
        "connection 'grid' field prefer must be one of 'cost', 'balance', got 'fast'"
    )
    assert _message(lambda: grid_settings({"providers": "[{"}, "grid")).startswith(
        "connection 'grid' field providers is not valid JSON"
    )
