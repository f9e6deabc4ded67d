"""What a job page shows, built from real states (no server): status, conditions, signals."""

from __future__ import annotations

import html
import json
import re

from elasticgrid_provider.core.fleet.ledger import ShrinkRequest
from elasticgrid_provider.core.policy.grid import GridShare
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.samples import StepSample
from elasticgrid_provider.core.state import ScaleState
from elasticgrid_provider.links import job_page_path
from elasticgrid_provider.plugins.jobs import (
    find_task_decision,
    job_row,
    parse_state,
    shared_grid_of,
)
from elasticgrid_provider.plugins.pages import job_page, jobs_page
from elasticgrid_provider.plugins.view import job_view
from tests.plugins.recorded import T0, audited_job, check, deadline_job


def _stored(state: ScaleState):
    return parse_state(f"elasticgrid_scale_state__{state.job_name}", json.dumps(state.model_dump()))


def _conditions(view) -> dict[str, tuple[bool, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in view["conditions"]}


def _signals(view) -> dict[str, dict[str, str]]:
    return {row["name"]: row for row in view["signals"]}


def _text(page: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def _no_missing_seconds(text: str) -> bool:
    """No "-s" (a missing number of seconds) as a word of the page."""
    return re.search(r"(^|\s)-s\b", text) is None


def _checked(scheduler: ScalePolicy, nodes: int, queue_s: float, **inputs) -> ScaleState:
    """A job at ``nodes`` after one real check of four 10 s steps with ``queue_s`` queued."""
    samples = [StepSample(step, 10.0, queue_s, nodes) for step in range(4)]
    state, _ = ScaleState("checked").advance(scheduler, samples, nodes, T0, **inputs)
    return state


def test_a_job_at_its_ceiling_with_a_deadline_shows_the_limit_and_the_projection():
    scheduler = ScalePolicy(min_nodes=1, max_nodes=4, cooldown_s=0, min_samples=3)
    state = _checked(scheduler, 4, 6.0, deadline_at=T0 + 600, remaining_steps=100)
    view = job_view(_stored(state), now=T0 + 10)
    conditions = _conditions(view)
    assert conditions["ScalingLimited"] == (
        True,
        "TooManyNodes",
        "the policy wants 8 nodes, clamped to the ceiling max_nodes=4",
    )
    # the ceiling is a limit, not a hold of the kind AbleToScale reports
    assert conditions["AbleToScale"][:2] == (True, "ReadyForNewScale")
    assert conditions["MeetsDeadline"][:2] == (False, "DeadlineMissed")
    # 100 steps of 10 s at 4 nodes take 1000 s; 600 s are left
    assert _signals(view)["projected finish"] == {
        "name": "projected finish",
        "current": "1000s at 4 nodes",
        "target": "deadline 2026-01-01 00:10:00 UTC, 600s left",
    }
    assert "the policy wants 8 nodes, clamped to the ceiling max_nodes=4" in job_page(view)


def test_the_recorded_job_shows_the_recommendation_thresholds_and_projected_finish():
    view = job_view(_stored(deadline_job()), now=T0 + 1600)
    # the newest check: deadline_pressure wants 7 nodes, the cooldown holds the job at 4
    assert (view["summary"]["current_nodes"], view["summary"]["desired_nodes"]) == (4, 7)
    assert view["summary"]["last_decision"].startswith(
        "hold 4 -> 4; rule deadline_pressure (deadline_margin=0.07, startup_s=60); "
        "held by cooldown (cooldown_s=3600, scale_down_cooldown_s=3600)"
    )
    # 150 steps of 5 s at 4 nodes take 750 s; at 7, 428.57 s and a minute of restart
    assert _signals(view)["projected finish"]["current"] == (
        "750s at 4 nodes, 488.57s at 7 with the restart"
    )
    assert _conditions(view)["MeetsDeadline"][:2] == (True, "OnTrack")
    # demand and capacity in their own unit (100 tokens a step), not the remaining work's
    assert _signals(view)["demand vs capacity"]["current"] == (
        "demand 40 tokens/s against a capacity of 20 tokens/s at 4 nodes: utilisation 2"
    )
    # the scale-up at 00:05 started an hour's cooldown: the policy recorded until when
    status, reason, message = _conditions(view)["AbleToScale"]
    assert (status, reason) == (False, "BackoffUp")
    assert message.startswith("held by cooldown until 2026-01-01T01:05:00Z: in cooldown")
    held = view["timeline"][1]
    assert held["held"] == "held 3 times by cooldown"
    assert (held["first_at"]["absolute"], held["last_at"]["absolute"]) == (
        "2026-01-01 00:10:00 UTC",
        "2026-01-01 00:20:00 UTC",
    )
    assert held["held_by"] == "cooldown (cooldown_s=3600, scale_down_cooldown_s=3600)"
    text = _text(job_page(view))
    assert "Current nodes 4 Desired nodes 7" in text
    assert _no_missing_seconds(text)
    for expected in (
        "deadline_pressure (deadline_margin=0.07, startup_s=60)",
        "queue_bound (target_queue_fraction=0.2, scale_up_factor=2)",
        "cooldown (cooldown_s=3600, scale_down_cooldown_s=3600)",
        "750s at 4 nodes, 488.57s at 7 with the restart",
    ):
        assert expected in text, expected


def test_a_hold_by_the_restart_cost_is_a_condition_not_able_to_scale():
    # the queue fills 3% of the step: 5 nodes would do, 4 -> 5 does not pay its restart
    scheduler = ScalePolicy(min_nodes=1, max_nodes=8, min_samples=3, startup_s=600)
    state = _checked(scheduler, 4, 2.5)
    record = state.history[-1]
    assert [hold["rule"] for hold in record["held_by"]] == ["restart_cost"]
    view = job_view(_stored(state), now=T0 + 10)
    status, reason, message = _conditions(view)["AbleToScale"]
    assert (status, reason) == (False, "RestartNotWorthIt")
    assert message.startswith("held by restart_cost: the projected gain")
    assert view["summary"]["desired_nodes"] == record["recommended_nodes"] != 4


def test_a_decision_without_finish_times_shows_no_projected_finish_row():
    scheduler = ScalePolicy(min_nodes=1, max_nodes=8, min_samples=3)
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
        "target": "deadline 2026-01-01 00:10:00 UTC, 600s left",
    }


def test_demand_against_capacity_is_in_units_with_the_utilisation_and_its_threshold():
    # utilisation 1.94 is demand over capacity, said in units, never "capacity covers demand"
    scheduler = ScalePolicy(min_nodes=1, max_nodes=8, min_samples=3)
    view = job_view(_stored(_checked(scheduler, 2, 4.85)), now=T0)
    row = _signals(view)["demand vs capacity"]
    assert row["current"] == (
        "demand 0.194 steps/s against a capacity of 0.1 steps/s at 2 nodes: utilisation 1.94"
    )
    assert row["target"] == "over capacity: scale up above 1.25 (queue fraction 0.2)"
    assert "projection." not in row["current"]
    # a balanced job: capacity covers demand, below the threshold
    calm = _signals(job_view(_stored(_checked(scheduler, 2, 1.0)), now=T0))["demand vs capacity"]
    assert calm["target"].startswith("capacity covers demand: scale up above 1.25")
    assert "utilisation 1.11" in calm["current"]


def test_an_unbounded_demand_reads_unbounded():
    scheduler = ScalePolicy(min_nodes=1, max_nodes=8, min_samples=3)
    view = job_view(_stored(_checked(scheduler, 4, 10.0)), now=T0)
    demand = _signals(view)["demand vs capacity"]
    assert demand["current"].startswith("demand unbounded against a capacity of")
    assert demand["target"].startswith("over capacity")
    assert "e+308" not in demand["current"] and "inf" not in demand["current"]


def test_a_scale_up_within_its_bounds_is_not_limited_and_colours_follow_the_meaning():
    # 2 -> 4 with min_nodes=2 is not "ScalingLimited True: limited by floor", and the
    # healthy ScalingLimited False is not red
    scheduler = ScalePolicy(min_nodes=2, max_nodes=8, min_samples=3, cooldown_s=600)
    state = _checked(scheduler, 2, 5.0)
    assert state.history[-1]["action"] == "scale_up"
    view = job_view(_stored(state), now=T0 + 10)
    limited = next(c for c in view["conditions"] if c["type"] == "ScalingLimited")
    assert (limited["status"], limited["reason"], limited["tone"]) == (
        False,
        "DesiredWithinRange",
        "ok",
    )
    page = job_page(view)
    assert (
        '<td class="c-type">ScalingLimited</td><td class="c-status"><span class="ok">False</span>'
        in page
    )
    assert (
        '<td class="c-type">AbleToScale</td><td class="c-status"><span class="ok">True</span>'
        in page
    )
    ceiling = ScalePolicy(min_nodes=1, max_nodes=4, min_samples=3, cooldown_s=0)
    capped = job_page(job_view(_stored(_checked(ceiling, 4, 8.0)), now=T0))
    assert (
        '<td class="c-type">ScalingLimited</td><td class="c-status"><span class="warn">True</span>'
        in capped
    )


def test_a_finished_job_reads_as_finished():
    # a job that ended at 4 nodes shows no "running", Desired 4, cost or cooldown
    # condition: those were the values of its last check
    ended = {
        "action": "hold",
        "current_nodes": 4,
        "target_nodes": 4,
        "rule": "job_ended",
        "reason": "job 'audit-job' is done; there is nothing to scale",
        "decided_at": T0 + 1300,
        "context": {"job_status": "done", "dag_id": "audit_dag", "run_id": "end"},
    }
    state = audited_job().remember_event(ended, T0 + 1300)
    view = job_view(_stored(state), now=T0 + 1400)
    assert (view["status"], view["finished"]) == ("done", True)
    assert view["summary"]["desired_nodes"] is None
    assert view["summary"]["cost_per_hour"] is None
    assert [c["type"] for c in view["conditions"]] == ["JobRunning"]
    text = _text(job_page(view))
    assert "none: the job ended" in text and "held by cooldown" not in text
    assert "Cost per hour -" in text
    # the launch record says done although the last check saw it running at 2 nodes
    live = {"status": "done", "nodes": 4, "launch_id": "L2", "parts": []}
    view = job_view(_stored(audited_job()), now=T0 + 1400, live=live)
    assert (view["status"], view["summary"]["current_nodes"]) == ("done", 4)
    assert view["summary"]["desired_nodes"] is None
    assert "AbleToScale" not in _conditions(view)
    row = job_row(_stored(audited_job()), live)
    assert (row["status"], row["status_source"], row["current_nodes"], row["ended"]) == (
        "done",
        "now",
        4,
        True,
    )
    assert "$6.00/h" not in jobs_page([row], "")  # no cost for a job that ended
    running_row = job_row(_stored(audited_job()), {"status": "running", "nodes": 4})
    assert '<td class="c-cost-per-hour">$6.00/h</td>' in jobs_page([running_row], "")
    # while it runs, the live size is shown beside the last decision's recommendation
    running = {"status": "running", "nodes": 4, "launch_id": "L2", "parts": []}
    view = job_view(_stored(audited_job()), now=T0 + 1400, live=running)
    assert (view["status"], view["status_source"], view["summary"]["desired_nodes"]) == (
        "running",
        "now",
        8,
    )


def test_a_scale_change_links_the_launch_that_followed_it():
    state = ScaleState("audit-job")
    for index, samples in enumerate((0, 1, 1)):
        state = check(state, T0 + 60 * index, 2, samples, f"early{index}", launch_id="L1")
    state = check(state, T0 + 300, 2, 2, "grow", launch_id="L1")
    state = check(state, T0 + 600, 4, 3, "late", launch_id="L2")
    launches = {"L2": {"dag_id": "audit_dag", "run_id": "grow", "task_id": "resize"}}
    view = job_view(_stored(state), now=T0 + 700, launches=launches)
    change = next(row for row in view["timeline"] if row["action"] == "scale_up")
    assert change["launch_after"] == {
        "launch_id": "L2",
        "task": "/dags/audit_dag/runs/grow/tasks/resize",
    }
    page = job_page(view)
    assert '<a href="/dags/audit_dag/runs/grow/tasks/resize" target="_top">L2</a>' in page
    # the newest change, with no check since: the live launch is the one that followed
    fresh = check(ScaleState("audit-job"), T0, 2, 4, "grow", launch_id="L1")
    part = {"name": "audit-job--onprem", "status": "running", "nodes": 2, "ranks": 2}
    live = {"status": "running", "nodes": 4, "launch_id": "L9", "parts": [part]}
    view = job_view(_stored(fresh), now=T0 + 60, live=live)
    row = view["timeline"][0]
    assert (row["action"], row["launch_after"]["launch_id"]) == ("scale_up", "L9")
    # opened from that check: its card links the launch's rank logs, as iroh-tinker keeps them
    opened = {"run_id": "grow", "map_index": -1}
    view = job_view(_stored(fresh), now=T0 + 60, live=live, highlight=opened)
    card = job_page(view, opened).split("<h2")[1]
    assert "Its rank logs" in card
    for rank in (0, 1):
        assert f'href="/elasticgrid/jobs/audit-job/logs/audit-job--onprem/{rank}"' in card


def test_the_task_lookup_uses_the_map_index_and_the_job_the_task_checked():
    # dag/run/task alone is not enough: it would pick the first job alphabetically
    mapped = ScaleState("b-job")
    for index in (0, 1):
        mapped = check(mapped, T0 + index, 2, 0, "run", map_index=index)
    other = check(ScaleState("a-job"), T0, 2, 0, "run")
    states = [_stored(other), _stored(mapped)]
    found = find_task_decision(states, "audit_dag", "scale_check", "run", 1, "b-job")
    assert found is not None and (found[0].job_name, found[1]) == ("b-job", 0)
    # the unmapped instance of the same ids is a-job's
    found = find_task_decision(states, "audit_dag", "scale_check", "run", -1, None)
    assert found is not None and found[0].job_name == "a-job"
    assert find_task_decision(states, "audit_dag", "scale_check", "run", 1, "a-job") is None


def test_a_state_that_does_not_load_is_shown_with_its_error():
    stored = parse_state("elasticgrid_scale_state__odd", json.dumps({"schema_version": 99}))
    assert "schema_version" in stored.error and "99" in stored.error
    assert stored.data == {"schema_version": 99}  # shown as far as it goes
    broken = parse_state("elasticgrid_scale_state__odd", "{not json")
    assert broken.data is None and broken.error.startswith("the state is not valid JSON")
    assert "This state does not load" in job_page(job_view(stored, now=T0))


def test_a_cost_that_is_no_number_and_a_projection_that_is_a_list_still_render():
    # neither "n/a" (the list, for everyone) nor ["x"] (the job's page) breaks a page
    data = deadline_job().model_dump()
    data["history"][-1]["context"]["cost_per_hour"] = "n/a"
    data["history"][-1]["projection"] = ["x"]
    stored = parse_state("elasticgrid_scale_state__audit-job", json.dumps(data))
    row = job_row(stored)
    assert row["cost_per_hour"] is None and row["job_name"] == "audit-job"
    page = job_page(job_view(stored, now=T0))
    assert "Scale decisions: audit-job" in page


def test_a_capacity_hold_shows_who_held_what_on_the_shared_grid():
    scheduler = ScalePolicy(min_nodes=1, max_nodes=8, cooldown_s=0, min_samples=3)
    holders = {"big": {"local": 3}, "small": {"cloud": 1, "local": 1}}
    grid = GridShare(job="checked", max_nodes=2, holders=holders)
    state = _checked(scheduler, 2, 8.0, grid=grid)
    view = job_view(_stored(state), now=T0 + 10)
    row = view["timeline"][0]
    assert (row["action"], row["held_by"]) == (
        "hold",
        "grid capacity (0 free; 'big' holds 3 on local; 'small' holds 1 on cloud and 1 on local)",
    )
    assert row["shared_grid"] == {
        "room": 2,
        "holders": ["'big' holds 3 on local", "'small' holds 1 on cloud and 1 on local"],
        "preempted_by": None,
    }
    assert _conditions(view)["AbleToScale"][:2] == (False, "NoFreeNodes")
    text = _text(job_page(view))
    assert "room for 2 nodes 'big' holds 3 on local 'small' holds 1 on cloud and 1 on local" in (
        text
    )


def test_a_preempted_decision_links_the_job_that_asked_for_the_nodes():
    scheduler = ScalePolicy(min_nodes=1, max_nodes=8, cooldown_s=3600, min_samples=3)
    shrink = ShrinkRequest("checked", 2, "urgent", 5, T0 - 5)
    state = _checked(scheduler, 4, 1.0, grid=GridShare(job="checked", shrink=shrink))
    view = job_view(_stored(state), now=T0 + 10)
    row = view["timeline"][0]
    assert (row["action"], row["from_nodes"], row["to_nodes"]) == ("scale_down", 4, 2)
    assert row["shared_grid"]["preempted_by"] == "urgent"
    page = job_page(view)
    assert f'preempted by <a href="{job_page_path("urgent")}" target="_top">urgent</a>' in page
    # a job alone on its grid shows no shared-grid entry at all
    alone = job_view(_stored(_checked(scheduler, 4, 1.0)), now=T0 + 10)
    assert alone["timeline"][0]["shared_grid"] == {}


def test_a_stored_shared_grid_of_the_wrong_types_still_renders():
    entry = {"grid": {"max_nodes": "two", "holders": {"big": {"local": -3}, "b": "x"}}}
    assert shared_grid_of(entry) == {"room": None, "holders": [], "preempted_by": None}
    assert shared_grid_of({"grid": [], "preempted_by": 7}) == {}


def test_a_streams_page_prints_its_demand_peak_band_covering_size_and_restart_trade_off():
    # 1000 tokens every 10 s on 10 nodes that serve 380 tokens/s: 3 nodes cover 105/s
    scheduler = ScalePolicy(min_nodes=1, max_nodes=16, cooldown_s=0, startup_s=60)
    service_s = 1000 / 380
    samples = [
        StepSample(step, service_s, 0.0, 10, 1000.0, T0 - 60 + 10 * step + service_s)
        for step in range(6)
    ]
    state, record = ScaleState("stream").advance(scheduler, samples, 10, T0)
    projection = record.decision.projection
    assert projection is not None and projection["covering_nodes"] == 3
    view = job_view(_stored(state), now=T0 + 10)
    status, reason, message = _conditions(view)["DemandCovered"]
    assert (status, reason) == (True, "PeakCovered")
    # the page prints what the policy recorded, not a figure of its own
    assert message == next(
        c.message for c in record.decision.conditions if c.type == "DemandCovered"
    )
    text = _text(job_page(view))
    for expected in (
        "demand 100 tokens/s, peak 100 over the newest 120s",
        # 3 nodes, below the measured 10, count on the 10% prior's gain per halving
        "with the 5% band 3 nodes cover it (136.89 tokens/s)",
        "restart trade-off: 24780 node-seconds saved over the 3600s until the next expected "
        "change against a restart price of 600",
        "prior: pessimistic default",
        "band 0.05, tolerance 0.1",
    ):
        assert expected in text, expected
