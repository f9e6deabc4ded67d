"""What a job page shows, built from real states (no server): conditions, signals, chart."""

from __future__ import annotations

import json

from elasticgrid_provider.core.samples import MetricsWindow, StepSample
from elasticgrid_provider.core.scheduler import ElasticScheduler
from elasticgrid_provider.core.state import DecisionInputs, DecisionRecord, ScaleState
from elasticgrid_provider.plugins.jobs import job_view, parse_state
from elasticgrid_provider.plugins.pages import job_page
from tests.plugins.recorded import T0, audited_job


def _stored(state: ScaleState):
    return parse_state(f"elasticgrid_scale_state__{state.job_name}", json.dumps(state.to_dict()))


def _conditions(view) -> dict[str, str]:
    return {c["type"]: (c["status"], c["message"]) for c in view["conditions"]}


def test_a_job_at_its_ceiling_with_a_deadline_shows_the_limit_and_the_projection():
    scheduler = ElasticScheduler(min_nodes=1, max_nodes=4, cooldown_s=0, min_samples=3)
    window = MetricsWindow(samples=tuple(StepSample(i, 10.0, 6.0, 4) for i in range(4)))
    inputs = DecisionInputs(scheduler, window, T0, 4, deadline_at=T0 + 600, remaining_steps=100)
    record = DecisionRecord(inputs.decide(), inputs, {"dag_id": "d", "run_id": "r"})
    state = ScaleState("capped", current_nodes=4).with_record(record)
    view = job_view(_stored(state), now=T0 + 10)
    conditions = _conditions(view)
    assert conditions["ScalingLimited"] == (True, "limited by ceiling (max_nodes=4)")
    assert conditions["AbleToScale"] == (True, "able to scale")  # no cooldown configured
    assert conditions["MeetsDeadline"][0] is False
    signals = {row["name"]: row for row in view["signals"]}
    # 100 steps of 10 s at 4 nodes take 1000 s; 600 s are left
    assert signals["projected finish"]["current"].startswith("1000s at 4 nodes")
    assert signals["projected finish"]["target"] == "deadline 2026-01-01T00:10:00+00:00, 600s left"
    assert view["summary"]["desired_nodes"] == 4
    assert "limited by ceiling (max_nodes=4)" in job_page(view)


def test_the_cooldown_condition_says_until_when():
    view = job_view(_stored(audited_job()), now=T0 + 1300)
    # the scale-up at 00:05 starts a 3600 s cooldown
    status, message = _conditions(view)["AbleToScale"]
    assert status is False
    assert message == "held by cooldown until 2026-01-01 01:05 UTC"
    assert _conditions(job_view(_stored(audited_job()), now=T0 + 4000))["AbleToScale"][0]


def test_the_chart_has_one_point_per_decision_and_the_step_after_a_change():
    points = job_view(_stored(audited_job()), now=T0)["chart"]
    # three holds as a run (first, last), the scale-up (before, after), three holds as a run
    assert [(p["at"] - T0, p["nodes"]) for p in points] == [
        (0.0, 2),
        (120.0, 2),
        (300.0, 2),
        (300.0, 4),
        (600.0, 4),
        (1200.0, 4),
    ]
    assert [p["cost_per_hour"] for p in points] == [3.0, 3.0, 3.0, 6.0, 6.0, 6.0]


def test_a_state_that_does_not_load_is_shown_with_its_error():
    stored = parse_state("elasticgrid_scale_state__odd", json.dumps({"schema_version": 99}))
    assert "schema_version" in stored.error and "99" in stored.error
    assert stored.data == {"schema_version": 99}  # shown as far as it goes
    broken = parse_state("elasticgrid_scale_state__odd", "{not json")
    assert broken.data is None and broken.error.startswith("the state is not valid JSON")
    assert "This state does not load" in job_page(job_view(stored, now=T0))
