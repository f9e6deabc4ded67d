"""The scale state and its one transition: observe -> decide -> remember (schema 2)."""

from __future__ import annotations

import json

import pytest

from elasticgrid_provider.core.errors import ElasticGridError, NewerRecordError
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.policy.rules import ScaleAction
from elasticgrid_provider.core.samples import StepSample
from elasticgrid_provider.core.state import (
    STATE_LAYOUT,
    DecisionRecord,
    ScaleState,
)

T0 = 1_700_000_000.0


def steps(nodes: int, count: int, *, step_s: float, queue_s: float = 0.0, first: int = 0):
    """Back-to-back steps ending at T0 + 10 * index."""
    return [
        StepSample(first + i, step_s, queue_s, nodes, 0.0, T0 + 10.0 * (first + i))
        for i in range(count)
    ]


def test_observe_keeps_only_samples_at_the_current_size_and_remembers_what_they_measured():
    state = ScaleState("job").observe(steps(8, 3, step_s=2.0) + steps(4, 2, step_s=3.0), 8, T0)
    assert [sample.nodes for sample in state.window.samples] == [8, 8, 8]
    assert state.current_nodes == 8
    [measured] = state.capacity.sizes
    assert (measured.nodes, measured.samples) == (8, 3)
    assert measured.steps_per_node_s == pytest.approx(1 / 16)  # one 2 s step on 8 nodes


def test_a_resize_starts_a_fresh_window_but_keeps_the_capacity_memory():
    state = ScaleState("job").observe(steps(8, 4, step_s=2.0), 8, T0)
    resized = state.observe(steps(16, 2, step_s=1.2, first=4), 16, T0 + 100)
    assert [sample.nodes for sample in resized.window.samples] == [16, 16]
    assert [entry.nodes for entry in resized.capacity.sizes] == [8, 16]
    # back at 8 with one sample: the fuller measurement at 8 is kept
    back = resized.observe(steps(8, 1, step_s=2.5, first=6), 8, T0 + 200)
    assert {e.nodes: e.samples for e in back.capacity.sizes} == {8: 4, 16: 2}


def test_advance_is_observe_decide_remember_and_the_record_replays():
    scheduler = ScalePolicy()
    state = ScaleState("job")
    state, first = state.advance(scheduler, steps(2, 2, step_s=0.4, queue_s=0.2), 2, T0)
    assert first.decision.rule == "min_samples"
    state, second = state.advance(
        scheduler, steps(2, 2, step_s=0.4, queue_s=0.2, first=2), 2, T0 + 30
    )
    assert (second.decision.action, second.decision.target_nodes) == (ScaleAction.SCALE_UP, 4)
    assert state.cooldown == second.decision.cooldown
    assert state.revision == 2 and state.updated_at == T0 + 30
    assert [(r.at, r.nodes) for r in state.recent] == [(T0 + 30, 4)]
    assert [entry["action"] for entry in state.history] == ["hold", "scale_up"]
    # the record holds everything the decision depended on
    stored = DecisionRecord.model_validate(json.loads(json.dumps(state.history[-1])))
    assert stored.inputs.capacity == second.inputs.capacity
    assert stored.replay() == second.decision


def test_repeated_holds_with_the_same_rule_are_kept_once():
    scheduler = ScalePolicy(min_samples=10)
    state = ScaleState("job")
    for index in range(3):
        state, _ = state.advance(scheduler, steps(2, 1, step_s=1.0, first=index), 2, T0 + index)
    assert [entry["rule"] for entry in state.history] == ["min_samples"]
    assert state.revision == 3


def test_recent_recommendations_outside_the_window_are_dropped():
    scheduler = ScalePolicy(scale_down_window_s=100.0, min_samples=1)
    state = ScaleState("job")
    state, _ = state.advance(scheduler, steps(8, 1, step_s=20.0), 8, T0)
    state, _ = state.advance(scheduler, steps(8, 1, step_s=20.0, first=1), 8, T0 + 50)
    assert [r.at for r in state.recent] == [T0, T0 + 50]
    state, _ = state.advance(scheduler, steps(8, 1, step_s=20.0, first=2), 8, T0 + 150)
    assert [r.at for r in state.recent] == [T0 + 50, T0 + 150]


def test_the_state_round_trips_as_schema_2():
    state, _ = ScaleState("job").advance(ScalePolicy(), steps(4, 4, step_s=1.0), 4, T0)
    data = json.loads(json.dumps(state.model_dump()))
    assert data["schema_version"] == STATE_LAYOUT.major == 2
    assert ScaleState.model_validate(data) == state


def test_a_version_1_state_is_migrated():
    old = {
        "schema_version": 1,
        "job_name": "job",
        "revision": 7,
        "updated_at": T0,
        "current_nodes": 4,
        "window": {"size": 10, "samples": [{"step": 1, "duration_s": 2.0, "nodes": 4}]},
        "cursors": {"steps.jsonl": 120},
        "cooldown": {"last_change_at": T0 - 50, "last_action": "scale_up"},
        "skipped_lines": 1,
        "history": [],
    }
    state = ScaleState.model_validate(old)
    assert (state.revision, state.current_nodes, state.cursor("steps.jsonl")) == (7, 4, 120)
    assert state.capacity.sizes == () and state.recent == ()
    assert state.model_dump()["schema_version"] == 2


def test_an_unknown_version_fails_with_one_sentence_saying_what_to_do():
    with pytest.raises(ElasticGridError) as error:
        ScaleState.model_validate({"schema_version": 0, "job_name": "job"})
    message = str(error.value)
    assert message == (
        "scale state schema_version must be 2 (or 1, which is migrated), got 0; delete the "
        "job's Variable elasticgrid_scale_state__job to start afresh"
    )
    with pytest.raises(NewerRecordError) as newer:
        ScaleState.model_validate({"schema_version": 3, "job_name": "job"})
    assert str(newer.value) == (
        "scale state schema_version 3 was written by a newer release of elasticgrid-provider "
        "than this worker's, which reads 2.0: upgrade elasticgrid-provider here; the scale "
        "state is left as it is"
    )


def test_deciding_before_any_sample_says_so():
    with pytest.raises(ElasticGridError, match="no current size"):
        ScaleState("job").decide(ScalePolicy(), T0)
