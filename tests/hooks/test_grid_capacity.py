"""GridCapacity's plan step on a real ledger on disk: replans of running jobs, shrink requests."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from elasticgrid_provider.core.errors import GridCapacityError
from elasticgrid_provider.core.fleet.ledger import (
    CapacityRequest,
    job_usage,
    lease_for,
    queue_position,
    shrink_request_for,
)
from elasticgrid_provider.core.fleet.sharing import ShortfallMode, Verdict
from elasticgrid_provider.core.fleet.view import fleet_view
from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.providers import providers_from_dicts
from elasticgrid_provider.hooks.grid_capacity import GridCapacity
from elasticgrid_provider.hooks.grid_ledger import GridLedgerStore
from tests.dags.fleet_dags import FOUR_LOCAL_NODES

PLANNER = GridPlanner(providers=providers_from_dicts(FOUR_LOCAL_NODES))


def _capacity(root: Path) -> GridCapacity:
    return GridCapacity(GridLedgerStore(root))


def test_a_running_job_replans_within_its_own_nodes_while_another_waits(tmp_path):
    capacity = _capacity(tmp_path)
    held = capacity.plan(PLANNER, CapacityRequest("holder", 4, 4))
    assert held.decision.verdict is Verdict.GRANTED
    waiting = capacity.plan(PLANNER, CapacityRequest("waiter", 2, 2))
    assert (waiting.decision.verdict, waiting.decision.queue_position) == (Verdict.WAITING, 1)

    again = capacity.plan(PLANNER, CapacityRequest("holder", 4, 4))  # a retry, same size
    smaller = capacity.plan(PLANNER, CapacityRequest("holder", 2, 2))  # a shrink

    assert again.decision.verdict is Verdict.GRANTED
    assert smaller.decision.verdict is Verdict.GRANTED
    assert smaller.reservation["nodes"] == {"local": 2}
    ledger = capacity.store.snapshot().ledger
    # no launch record holds the 4 yet: the smaller reservation replaces the larger one
    assert job_usage(ledger, "holder") == {"local": 2}
    assert queue_position(ledger, "waiter") == 1


def test_a_waiting_higher_priority_plan_asks_lower_ones_to_shrink_to_their_min_nodes(tmp_path):
    capacity = _capacity(tmp_path)
    capacity.plan(PLANNER, CapacityRequest("low", 4, 1, priority=0))
    capacity.plan(PLANNER, CapacityRequest("peer", 1, 1, priority=3, mode=ShortfallMode.FAIL))

    high = capacity.plan(PLANNER, CapacityRequest("high", 3, 3, priority=3))
    assert high.decision.verdict is Verdict.WAITING
    assert [(s.job, s.to_nodes, s.by_job, s.by_priority) for s in high.shrinks] == [
        ("low", 1, "high", 3)
    ]
    ledger = capacity.store.snapshot().ledger
    assert shrink_request_for(ledger, "low") is not None
    assert shrink_request_for(ledger, "peer") is None  # equal priorities never shrink each other


def test_fail_mode_changes_nothing(tmp_path):
    capacity = _capacity(tmp_path)
    capacity.plan(PLANNER, CapacityRequest("holder", 3, 3))
    before = (tmp_path / ".grid" / "ledger.json").read_text()

    failed = capacity.plan(PLANNER, CapacityRequest("late", 2, 2, mode=ShortfallMode.FAIL))

    assert failed.decision.verdict is Verdict.FAILED
    assert failed.decision.reason == (
        "job 'late' wants 2 more nodes but 1 is free: 'holder' holds 3 on local"
    )
    ledger = capacity.store.snapshot().ledger
    assert ledger.jobs == ("holder",)
    assert (tmp_path / ".grid" / "ledger.json").read_text().count('"job"') == before.count('"job"')


def test_a_request_whose_task_vanished_lapses_and_its_returning_trigger_queues_it_again(
    tmp_path, caplog
):
    now = [1_800_000_000.0]
    capacity = GridCapacity(GridLedgerStore(tmp_path, clock=lambda: now[0]))
    capacity.plan(PLANNER, CapacityRequest("low", 4, 1, priority=0))
    high = CapacityRequest("high", 3, 3, priority=3, lease_s=lease_for(30.0))
    second = CapacityRequest("second", 1, 1, priority=1)  # waits too, on the default lease
    capacity.plan(PLANNER, second)
    assert capacity.plan(PLANNER, high).shrinks  # it waits, and asks "low" to shrink

    now[0] += 100.0
    assert capacity.renew(high) is False  # a look within the lease renews it
    now[0] += 119.0
    with caplog.at_level(logging.WARNING):
        ledger = capacity.store.snapshot().ledger
    assert queue_position(ledger, "high") == 1 and shrink_request_for(ledger, "low") is not None
    assert "lease" not in caplog.text  # a snapshot reads; only a transaction tells

    now[0] += 2.0  # 121 s after the last look: the task is gone
    with caplog.at_level(logging.WARNING):
        assert capacity.renew(second) is False  # any transaction settles the queue
    assert "Job high's request left the grid queue" in caplog.text
    assert "past its 120 s lease" in caplog.text
    ledger = capacity.store.snapshot().ledger
    assert queue_position(ledger, "high") is None and shrink_request_for(ledger, "low") is None

    assert capacity.renew(high) is True  # its trigger came back: queued again, at the back
    ledger = capacity.store.snapshot().ledger
    assert [r.job for r in ledger.queue] == ["second", "high"]
    assert queue_position(ledger, "high") == 1  # a higher priority still goes first


def test_a_plan_whose_provider_name_means_another_pool_is_refused_and_not_queued(tmp_path):
    capacity = _capacity(tmp_path)
    capacity.plan(PLANNER, CapacityRequest("holder", 4, 4))
    other_pool = [{**FOUR_LOCAL_NODES[0], "engine": "fakecloud"}]
    planner = GridPlanner(providers=providers_from_dicts(other_pool))

    with pytest.raises(GridCapacityError, match="provider 'local' of job 'waiter' is not the pool"):
        capacity.plan(planner, CapacityRequest("waiter", 2, 2))

    assert capacity.store.snapshot().ledger.queue == ()


def test_a_plan_that_starts_to_queue_audits_one_round_and_a_retry_none(tmp_path):
    capacity = _capacity(tmp_path)
    capacity.plan(PLANNER, CapacityRequest("holder", 4, 4))
    capacity.plan(PLANNER, CapacityRequest("waiter", 2, 2))
    capacity.plan(PLANNER, CapacityRequest("waiter", 2, 2))  # the waiting plan looks again
    ledger = capacity.store.snapshot().ledger
    (audited,) = ledger.rounds  # one round: the one in which 'waiter' started to queue
    assert (audited.by, audited.order) == ("plan of waiter", ("waiter", "holder"))
    assert audited.result == {"waiter": 0, "holder": 4}
    assert audited.queued == {
        "waiter": "needs 2 nodes and 0 are free; shrinking lower-priority jobs would not make "
        "it fit"
    }
    view = fleet_view(ledger, {"local": 4})
    assert view["queue"][0]["reason"] == audited.queued["waiter"]
    assert [row["job"] for row in view["last_round"]["order"]] == ["waiter", "holder"]
