"""The recovery rules: lost parts, the quarantine, the budget, and what the planner leaves out."""

from __future__ import annotations

import json
import math

import pytest

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.placement import Placement
from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.providers import Provider
from elasticgrid_provider.core.recovery import (
    NO_RECOVERIES,
    LostPart,
    PastRecovery,
    QuarantineEntry,
    RecoveryAction,
    RecoveryMemory,
    RecoveryPolicy,
    decide_recovery,
    loss_cause,
    part_is_lost,
    quarantine_from_record,
    quarantine_reasons,
    taken_away,
)
from elasticgrid_provider.core.state import ScaleState, remember_recovery

RECOVER, GIVE_UP, WAIT = RecoveryAction.RECOVER, RecoveryAction.GIVE_UP, RecoveryAction.WAIT

ONPREM = Provider("onprem", max_nodes=1, cost_per_node_hour=0.0, spot=False)
SPOT = Provider("spot", max_nodes=1, cost_per_node_hour=1.0, spot=True)
BACKUP = Provider("backup", max_nodes=2, cost_per_node_hour=2.0, spot=False)
PLANNER = GridPlanner((ONPREM, SPOT, BACKUP))
NOW = 1_000_000.0
LOST_SPOT = LostPart(part="job--spot", provider="spot", nodes=1, ranks=(0,), cause="preempted")


def decide(memory: RecoveryMemory = NO_RECOVERIES, **overrides):
    arguments = {
        "job_name": "job",
        "launch_id": "launch-1",
        "lost": [LOST_SPOT],
        "current_nodes": 2,
        "min_nodes": 1,
        "max_nodes": 8,
        "memory": memory,
        "policy": RecoveryPolicy(max_recoveries=2, recovery_window_s=600, quarantine_s=60),
        "planner": PLANNER,
        "now": NOW,
        **overrides,
    }
    return decide_recovery(**arguments)


@pytest.mark.parametrize(
    ("status", "ranks_down", "lost"),
    [
        ("failed", [], True),
        ("running", [1], True),
        ("running", [], False),
        ("done", [], False),
        ("stopped", [], False),
    ],
)
def test_a_part_is_lost_when_it_failed_or_runs_with_ranks_down(status, ranks_down, lost):
    assert part_is_lost(status, ranks_down) is lost


def test_the_cause_is_the_last_log_line_naming_one_else_the_engine_error():
    tail = "step 3/9\npreempted: spot capacity reclaimed by spot\nstep 4/9\n"
    assert loss_cause(tail, "down ranks: [0]") == "preempted: spot capacity reclaimed by spot"
    assert loss_cause("step 3/9\n", "down ranks: [0]") == "its ranks stopped (down ranks: [0])"
    assert loss_cause("", None) == "its ranks stopped and their logs give no reason"


def test_a_loss_is_recovered_on_the_rest_of_the_grid_and_the_provider_quarantined():
    decision = decide()
    assert decision.action == RECOVER and decision.rule == "recover"
    assert (decision.current_nodes, decision.target_nodes) == (2, 2)
    placement = Placement.model_validate(decision.placement)
    assert placement.nodes_by_provider() == {"onprem": 1, "backup": 1}
    assert [name for name, _ in placement.left_out] == ["spot"]
    assert [(q.provider, q.since, q.until) for q in decision.quarantine] == [
        ("spot", NOW, NOW + 60)
    ]
    assert "lost part job--spot (provider 'spot', global rank 0: preempted)" in decision.reason
    assert "recovery 1 of at most 2 within 600s" in decision.reason


def test_a_part_whose_ranks_died_with_a_part_taken_away_is_relaunched_but_not_blamed():
    collateral = LostPart(
        part="job--onprem",
        provider="onprem",
        nodes=1,
        ranks=(1,),
        cause="ConnectionRefusedError: [Errno 111] Connection refused",
    )
    assert taken_away([collateral, LOST_SPOT]) == (LOST_SPOT,)
    assert taken_away([collateral]) == (collateral,)  # no notice: every lost part is blamed
    decision = decide(lost=[collateral, LOST_SPOT])
    assert decision.action == RECOVER
    assert [q.provider for q in decision.quarantine] == ["spot"]
    placement = Placement.model_validate(decision.placement)
    assert placement.nodes_by_provider() == {"onprem": 1, "backup": 1}
    assert "lost part job--onprem (provider 'onprem', global rank 1: Connection" in (
        decision.reason
    )


def test_the_job_shrinks_to_what_is_left_but_not_below_min_nodes():
    small = GridPlanner((ONPREM, SPOT))
    shrunk = decide(planner=small)
    assert (shrunk.action, shrunk.target_nodes) == (RECOVER, 1)
    refused = decide(planner=small, min_nodes=2)
    assert refused.action == GIVE_UP and refused.target_nodes == 0
    assert "no capacity is left to recover it" in refused.reason
    assert "holds 1 node(s), fewer than min_nodes 2" in refused.reason


def test_the_budget_within_the_window_is_kept_and_then_the_check_gives_up():
    policy = RecoveryPolicy(max_recoveries=1, recovery_window_s=600, quarantine_s=60)
    first = decide(policy=policy)
    state = remember_recovery(ScaleState("job"), first, first.model_dump(), 20)
    second = decide(state.recovery, policy=policy, launch_id="launch-2", now=NOW + 100)
    assert second.action == GIVE_UP
    assert second.reason.startswith("job 'job' lost part job--spot")
    assert "already recovered 1 time(s) within the last 600s (max_recoveries=1)" in second.reason
    assert second.reason.count(". ") == 0  # one sentence
    later = decide(state.recovery, policy=policy, launch_id="launch-2", now=NOW + 601)
    assert later.action == RECOVER  # the first recovery left the window


def test_max_recoveries_zero_turns_recovery_off():
    decision = decide(policy=RecoveryPolicy(max_recoveries=0))
    assert decision.action == GIVE_UP


def test_a_launch_is_recovered_once_a_second_check_waits_for_the_relaunch():
    first = decide()
    state = remember_recovery(ScaleState("job"), first, first.model_dump(), 20)
    again = decide(state.recovery, now=NOW + 5)
    assert again.action == WAIT
    assert "waiting for the relaunch" in again.reason
    with pytest.raises(ElasticGridError, match="is not recorded"):
        remember_recovery(state, again, again.model_dump(), 20)


def test_a_quarantine_ends_and_the_provider_is_planned_again():
    first = decide()
    memory = remember_recovery(ScaleState("job"), first, first.model_dump(), 20).recovery
    assert quarantine_reasons(memory.active_quarantine(NOW + 59)).keys() == {"spot"}
    assert quarantine_reasons(memory.active_quarantine(NOW + 60)) == {}
    lost_backup = LostPart(part="job--backup", provider="backup", nodes=1, cause="preempted")
    second = decide(memory, launch_id="launch-2", lost=[lost_backup], now=NOW + 61)
    assert Placement.model_validate(second.placement).nodes_by_provider() == {
        "onprem": 1,
        "spot": 1,
    }
    assert [q.provider for q in second.quarantine] == ["backup"]


def test_the_recovery_enters_the_state_history_and_round_trips():
    decision = decide()
    record = decision.as_record({"dag_id": "d"})
    state = remember_recovery(ScaleState("job"), decision, record, 20)
    assert state.history[-1]["action"] == "recover"
    assert state.history[-1]["lost"][0]["part"] == "job--spot"
    assert state.history[-1]["context"]["readable"]["summary"].startswith("recover 2 -> 2; rule")
    stored = json.loads(json.dumps(state.model_dump()))
    loaded = ScaleState.model_validate(stored)
    assert loaded.recovery == state.recovery
    assert loaded.recovery.recoveries == (PastRecovery(at=NOW, launch_id="launch-1"),)


def test_a_state_without_recovery_loads_with_none():
    stored = ScaleState("job").model_dump()
    del stored["recovery"]
    assert ScaleState.model_validate(stored).recovery == NO_RECOVERIES


@pytest.mark.parametrize(
    ("memory", "message"),
    [
        ({"quarantine": "x"}, "scale state recovery.quarantine must be a list, got 'x'"),
        (
            {"quarantine": [{"provider": "a", "since": 1, "until": math.inf, "reason": "r"}]},
            "scale state recovery.quarantine.0.until must be a finite number, got inf",
        ),
        (
            {"recoveries": [{"at": True, "launch_id": "l"}]},
            "scale state recovery.recoveries.0.at must be a number, got True",
        ),
    ],
)
def test_a_bad_stored_memory_is_refused_in_one_sentence(memory, message):
    stored = {**ScaleState("job").model_dump(), "recovery": memory}
    with pytest.raises(ElasticGridError) as caught:
        ScaleState.model_validate(stored)
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"max_recoveries": -1}, "max_recoveries"),
        ({"max_recoveries": 1.5}, "max_recoveries"),
        ({"recovery_window_s": 0}, "recovery_window_s"),
        ({"quarantine_s": math.nan}, "quarantine_s"),
        ({"quarantine_s": "10"}, "quarantine_s"),
    ],
)
def test_a_bad_policy_value_names_the_field_and_value(values, field):
    with pytest.raises(ElasticGridError) as caught:
        RecoveryPolicy(**values)
    assert str(caught.value).startswith(f"{field} must be ")
    assert repr(next(iter(values.values()))) in str(caught.value)


def test_the_planner_leaves_out_what_it_is_told_and_says_why():
    placement = PLANNER.plan(2, leave_out={"spot": "quarantined", "elsewhere": "not in the grid"})
    assert placement.nodes_by_provider() == {"onprem": 1, "backup": 1}
    assert placement.left_out == (("spot", "quarantined"),)
    assert Placement.model_validate(placement.model_dump()) == placement
    assert "left_out" not in PLANNER.plan(2).model_dump()
    with pytest.raises(ElasticGridError) as caught:
        PLANNER.plan(3, leave_out={"spot": "quarantined", "onprem": "down"})
    assert str(caught.value) == (
        "nodes 3 exceeds the grid's capacity of 2 nodes without the providers left out "
        "(onprem down; spot quarantined)"
    )


def test_a_record_tells_the_re_plan_what_to_leave_out():
    decision = decide()
    assert quarantine_from_record(decision.model_dump()).keys() == {"spot"}
    entry = QuarantineEntry(provider="spot", since=1.0, until=2.0, reason="lost")
    scale_record = {"action": "scale_up", "context": {"quarantine": [entry.model_dump()]}}
    assert quarantine_from_record(scale_record) == {
        "spot": "quarantined until 1970-01-01T00:00:02+00:00: lost"
    }
    assert quarantine_from_record(4) == {}
    with pytest.raises(
        ElasticGridError, match=r"decision record quarantine\.0\.provider must be a string, got 1"
    ):
        quarantine_from_record({"quarantine": [{"provider": 1}]})


def test_only_a_notice_that_capacity_was_taken_is_a_capacity_loss():
    from elasticgrid_provider.core.recovery import is_capacity_loss

    assert is_capacity_loss("preempted: spot capacity reclaimed by spot")
    assert is_capacity_loss("instance terminated by the provider (eviction)")
    assert not is_capacity_loss("rank 1: out of memory")
    assert not is_capacity_loss("ValueError: corrupt batch")
    assert not is_capacity_loss("its ranks stopped (down ranks: [0, 1])")
