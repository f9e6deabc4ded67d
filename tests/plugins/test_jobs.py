"""What a job page shows, built from real states (no server): conditions, signals, chart."""

from __future__ import annotations

import html
import json
import re

import pytest

from elasticgrid_provider.core.samples import StepSample
from elasticgrid_provider.core.scheduler import HOLD_RULES, ElasticScheduler
from elasticgrid_provider.core.state import ScaleState
from elasticgrid_provider.plugins.jobs import job_view, parse_state
from elasticgrid_provider.plugins.pages import job_page
from tests.plugins.recorded import T0, audited_job, deadline_job


def _stored(state: ScaleState):
    return parse_state(f"elasticgrid_scale_state__{state.job_name}", json.dumps(state.to_dict()))


def _conditions(view) -> dict[str, str]:
    return {c["type"]: (c["status"], c["message"]) for c in view["conditions"]}


def _signals(view) -> dict[str, dict[str, str]]:
    return {row["name"]: row for row in view["signals"]}


def _text(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def _no_missing_seconds(text: str) -> bool:
    """No "-s" (a missing number of seconds) as a word of the page."""
    return re.search(r"(^|\s)-s\b", text) is None


def _checked(scheduler: ElasticScheduler, nodes: int, queue_s: float, **inputs) -> ScaleState:
    """A job at ``nodes`` after one real check of four 10 s steps with ``queue_s`` queued."""
    samples = [StepSample(step, 10.0, queue_s, nodes) for step in range(4)]
    state, _ = ScaleState("checked").advance(scheduler, samples, nodes, T0, **inputs)
    return state


def test_a_job_at_its_ceiling_with_a_deadline_shows_the_limit_and_the_projection():
    scheduler = ElasticScheduler(min_nodes=1, max_nodes=4, cooldown_s=0, min_samples=3)
    state = _checked(scheduler, 4, 6.0, deadline_at=T0 + 600, remaining_steps=100)
    view = job_view(_stored(state), now=T0 + 10)
    conditions = _conditions(view)
    assert conditions["ScalingLimited"] == (True, "limited by ceiling (max_nodes=4)")
    assert conditions["AbleToScale"] == (
        False,
        "held by ceiling (max_nodes=4): already at the node ceiling of 4",
    )
    assert conditions["MeetsDeadline"][0] is False
    # 100 steps of 10 s at 4 nodes take 1000 s; 600 s are left
    assert _signals(view)["projected finish"] == {
        "name": "projected finish",
        "current": "1000s at 4 nodes",
        "target": "deadline 2026-01-01T00:10:00+00:00, 600s left",
    }
    assert "limited by ceiling (max_nodes=4)" in job_page(view)


def test_the_recorded_job_shows_the_recommendation_thresholds_and_projected_finish():
    view = job_view(_stored(deadline_job()), now=T0 + 1600)
    # the newest check: deadline_pressure wants 7 nodes, the cooldown holds the job at 4
    assert (view["summary"]["current_nodes"], view["summary"]["desired_nodes"]) == (4, 7)
    assert view["summary"]["last_decision"].startswith(
        "hold 4 -> 4; rule deadline_pressure (deadline_margin=0.1, startup_s=60); "
        "held by cooldown (cooldown_s=3600, scale_down_cooldown_s=3600)"
    )
    # 150 steps of 5 s at 4 nodes take 750 s; at 7, 428.57 s and a minute of restart
    assert _signals(view)["projected finish"] == {
        "name": "projected finish",
        "current": "750s at 4 nodes, 488.57s at 7 with the restart",
        "target": "deadline 2026-01-01T00:35:00+00:00, 600s left",
    }
    assert _conditions(view)["MeetsDeadline"] == (
        True,
        "meets the deadline 2026-01-01T00:35:00+00:00",
    )
    assert _conditions(view)["AbleToScale"] == (
        False,
        "held by cooldown until 2026-01-01 01:05 UTC",
    )
    held = view["timeline"][1]
    assert held["headline"] == "held 3 times by cooldown, 2026-01-01 00:10-00:20 UTC"
    assert held["held_by"] == "cooldown (cooldown_s=3600, scale_down_cooldown_s=3600)"
    text = _text(job_page(view))
    assert "Current nodes 4 Desired nodes 7" in " ".join(text.split())
    assert _no_missing_seconds(text)
    for expected in (
        "deadline_pressure (deadline_margin=0.1, startup_s=60)",
        "queue_bound (target_queue_fraction=0.2, scale_up_factor=2)",
        "cooldown (cooldown_s=3600, scale_down_cooldown_s=3600)",
        "750s at 4 nodes, 488.57s at 7 with the restart",
    ):
        assert expected in text, expected


def test_a_hold_by_the_restart_cost_is_a_condition_not_able_to_scale():
    # the queue fills 3% of the step: 5 nodes would do, 4 -> 5 does not pay its restart
    scheduler = ElasticScheduler(min_nodes=1, max_nodes=8, min_samples=3, startup_s=600)
    state = _checked(scheduler, 4, 2.5)
    record = state.history[-1]
    assert [hold["rule"] for hold in record["held_by"]] == ["restart_cost"]
    view = job_view(_stored(state), now=T0 + 10)
    status, message = _conditions(view)["AbleToScale"]
    assert status is False
    assert message.startswith(
        "held by restart_cost (startup_s=600, resize_margin=1, horizon_s=3600): the projected gain"
    )
    assert view["summary"]["desired_nodes"] == record["recommended_nodes"] != 4


def test_a_decision_without_finish_times_shows_no_projected_finish_row():
    # a queue-bound scale-up with no deadline: a projection, but no finish times in it
    scheduler = ElasticScheduler(min_nodes=1, max_nodes=8, min_samples=3)
    state = _checked(scheduler, 2, 5.0)
    assert state.history[-1]["projection"]
    view = job_view(_stored(state), now=T0)
    assert "projected finish" not in _signals(view)
    assert "deadline" not in _signals(view)
    assert _no_missing_seconds(_text(job_page(view)))
    # a deadline without the remaining work: the deadline row, no projection
    view = job_view(_stored(_checked(scheduler, 2, 5.0, deadline_at=T0 + 600)), now=T0)
    assert _signals(view)["deadline"] == {
        "name": "deadline",
        "current": "no projection (remaining work unknown)",
        "target": "deadline 2026-01-01T00:10:00+00:00, 600s left",
    }


def test_an_unbounded_demand_reads_unbounded():
    # the queue fills every step: the demand has no bound
    scheduler = ElasticScheduler(min_nodes=1, max_nodes=8, min_samples=3)
    view = job_view(_stored(_checked(scheduler, 4, 10.0)), now=T0)
    demand = _signals(view)["demand vs capacity"]["current"]
    assert "projection.demand_per_s unbounded" in demand
    assert "e+308" not in demand and "inf" not in demand


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


def test_the_page_escapes_each_value_once():
    view = job_view(_stored(audited_job()), now=T0)
    # a state read as far as it goes may hold anything where a number belongs
    view["variable_key"] = "elasticgrid_scale_state__a&b"
    view["revision"] = "3&4"
    view["summary"]["max_nodes"] = "8<"
    page = job_page(view)
    assert "elasticgrid_scale_state__a&amp;b, revision 3&amp;4" in page
    assert "1 / 8&lt;" in page
    assert "&amp;amp;" not in page and "&amp;lt;" not in page


def test_a_state_that_does_not_load_is_shown_with_its_error():
    stored = parse_state("elasticgrid_scale_state__odd", json.dumps({"schema_version": 99}))
    assert "schema_version" in stored.error and "99" in stored.error
    assert stored.data == {"schema_version": 99}  # shown as far as it goes
    broken = parse_state("elasticgrid_scale_state__odd", "{not json")
    assert broken.data is None and broken.error.startswith("the state is not valid JSON")
    assert "This state does not load" in job_page(job_view(stored, now=T0))


@pytest.mark.parametrize("rule", [rule for rule in HOLD_RULES if rule != "cooldown"])
def test_every_hold_shows_as_a_condition_with_its_thresholds(rule):
    scheduler = ElasticScheduler(min_nodes=1, max_nodes=8, min_samples=3, cooldown_s=0)
    state = _checked(scheduler, 2, 5.0)
    # the same record as if ``rule`` had held it back
    entry = {**state.history[-1], "action": "hold", "target_nodes": 2}
    entry["held_by"] = [{"rule": rule, "reason": f"the {rule} reason"}]
    data = {**state.to_dict(), "history": [entry]}
    stored = parse_state("elasticgrid_scale_state__checked", json.dumps(data))
    conditions = _conditions(job_view(stored, now=T0 + 10))
    status, message = conditions["AbleToScale"]
    assert status is False
    assert message.startswith(f"held by {rule} (") and message.endswith(f": the {rule} reason")
    if rule in ("ceiling", "floor", "deadline", "final_stretch"):
        assert conditions["ScalingLimited"][0] is True
