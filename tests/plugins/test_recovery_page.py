"""Recoveries on the job page: their own kind of event, with the lost part and the quarantine."""

from __future__ import annotations

import html
import json
import re

from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.providers import Provider
from elasticgrid_provider.core.recovery import LostPart, RecoveryPolicy, decide_recovery
from elasticgrid_provider.core.state import remember_recovery
from elasticgrid_provider.plugins.jobs import job_row, parse_state
from elasticgrid_provider.plugins.pages import job_page
from elasticgrid_provider.plugins.view import job_view
from tests.plugins.recorded import T0, audited_job

GRID = GridPlanner(
    (
        Provider("onprem", max_nodes=2, cost_per_node_hour=0.0, spot=False),
        Provider("spot<b>", max_nodes=2, cost_per_node_hour=1.0),
        Provider("backup", max_nodes=2, cost_per_node_hour=2.0),
    )
)


def _recovered(now: float):
    """The audited job of the other page tests, then a recovery from a reclaimed spot part."""
    state = audited_job("recovered-job")
    lost = LostPart(part="recovered-job--spot<b>", provider="spot<b>", nodes=2, cause="preempted")
    decision = decide_recovery(
        job_name="recovered-job",
        launch_id="launch-1",
        lost=[lost],
        current_nodes=4,
        min_nodes=1,
        max_nodes=8,
        memory=state.recovery,
        policy=RecoveryPolicy(quarantine_s=600),
        planner=GRID,
        now=now,
    )
    record = decision.as_record({"dag_id": "rescale", "run_id": "r1", "task_id": "scale_check"})
    state = remember_recovery(state, decision, record, 20)
    return parse_state("elasticgrid_scale_state__recovered-job", json.dumps(state.model_dump()))


def test_a_recovery_is_its_own_event_with_the_lost_part_and_the_quarantine():
    now = T0 + 3600
    view = job_view(_recovered(now), now=now + 10)
    [row] = view["recoveries"]
    assert (row["action"], row["from_nodes"], row["to_nodes"]) == ("recover", 4, 4)
    assert row["lost"] == ["recovered-job--spot<b> on spot<b>: preempted"]
    assert row["quarantine"] == ["spot<b> until " + view["quarantine"][0]["until"]["absolute"]]
    assert row["relaunched_on"] == "onprem 2, backup 2"
    newest = view["timeline"][0]
    assert (newest["kind"], newest["action"], newest["rule"]) == ("recovery", "recover", "recover")
    assert [part["provider"] for part in newest["lost"]] == ["spot<b>"]
    assert all(r["kind"] == "decision" for r in view["timeline"][1:])
    # a recovery is not a scale decision: the signals still come from the last one
    assert view["signals"] and view["summary"]["min_nodes"] is not None
    assert job_row(_recovered(now))["last_decision"] == "recover 4 -> 4 (recover)"

    page = job_page(view)
    assert "<b>" not in page  # every value escaped
    text = html.unescape(re.sub(r"<[^>]+>", " ", page))
    assert "Recoveries from lost capacity" in text
    assert "Quarantined now: spot<b> until" in text
    assert "recovered-job--spot<b> on spot<b>: preempted" in text
    assert '<tr class="recovery">' in page


def test_the_quarantine_is_gone_from_the_page_once_it_ends():
    now = T0 + 3600
    view = job_view(_recovered(now), now=now + 601)
    assert view["quarantine"] == []
    assert "Quarantined now" not in job_page(view)
    assert len(view["recoveries"]) == 1  # the event stays in the history


def test_a_job_that_never_lost_capacity_says_so():
    state = audited_job("steady-job")
    stored = parse_state("elasticgrid_scale_state__steady-job", json.dumps(state.model_dump()))
    view = job_view(stored, now=T0)
    assert view["recoveries"] == [] and view["quarantine"] == []
    assert "No capacity lost so far." in job_page(view)
