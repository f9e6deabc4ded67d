"""The grid ledger's pure rules: free nodes, reserve, confirm, release, the queue, reconcile."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from elasticgrid_provider.core.errors import ElasticGridError, GridCapacityError
from elasticgrid_provider.core.fleet.ledger import (
    DEFAULT_LEASE_S,
    CapacityRequest,
    GridLedger,
    HoldingPhase,
    QueuedRequest,
    confirm,
    dequeue,
    enqueue,
    free_nodes,
    job_usage,
    lapsed_requests,
    lease_for,
    queue_order,
    queue_position,
    release,
    renew,
    request_shrinks,
    reserve,
    shrink_request_for,
)
from elasticgrid_provider.core.fleet.reconcile import rebuild, reconcile
from elasticgrid_provider.core.fleet.sharing import PreemptionPlan, Resize
from elasticgrid_provider.core.job import JobManifest
from elasticgrid_provider.core.launch_record import LaunchPhase
from elasticgrid_provider.core.placement import Assignment, Placement
from elasticgrid_provider.core.providers import Provider

CAPACITIES = {"local": 4, "aws": 8}
LOCAL = Provider("local", max_nodes=4, cost_per_node_hour=0.0)
AWS = Provider("aws", max_nodes=8, cost_per_node_hour=3.0)
T0 = 1_800_000_000.0
OLD_LAUNCH = "20261203T100000Z-aaaaaa"
NEW_LAUNCH = "20261203T110000Z-bbbbbb"
NEWER_LAUNCH = "20261203T120000Z-cccccc"


def manifest(
    job: str, launch_id: str, shares: dict[str, int], state: LaunchPhase = LaunchPhase.RUNNING
) -> JobManifest:
    """A launch record of ``job`` running ``shares`` as ``launch_id``."""
    providers = {"local": LOCAL, "aws": AWS}
    placement = Placement(tuple(Assignment(providers[p], n) for p, n in shares.items()))
    return JobManifest(
        job_name=job,
        launch_id=launch_id,
        launched_at="2026-12-03T10:00:00+00:00",
        placement=placement,
        world_size=placement.total_nodes,
        procs_per_node=1,
        rendezvous="dir:/tmp/rendezvous",
        run="python train.py",
        state=state,
    )


def reserved(
    job: str, shares: dict[str, int], launch_id: str = NEW_LAUNCH, **kw: int
) -> GridLedger:
    return reserve(
        GridLedger(), job, shares, launch_id=launch_id, now=T0, capacities=CAPACITIES, **kw
    )


def test_free_nodes_are_capacity_less_what_every_job_uses():
    ledger = reserved("a", {"local": 3})
    ledger = reserve(ledger, "b", {"aws": 5}, launch_id=OLD_LAUNCH, now=T0, capacities=CAPACITIES)
    assert free_nodes(ledger) == {"aws": 3, "local": 1}
    assert free_nodes(ledger, for_job="a") == {"aws": 3, "local": 4}


def test_reserve_refuses_over_subscription_naming_provider_free_asked_and_holders():
    ledger = reserved("a", {"local": 3})
    with pytest.raises(GridCapacityError) as caught:
        reserve(ledger, "b", {"local": 2}, launch_id=OLD_LAUNCH, now=T0, capacities=CAPACITIES)
    assert str(caught.value) == (
        "provider 'local' has 1 free nodes but job 'b' asked for 2; held by 'a' (3 nodes)"
    )


def test_reserve_refuses_an_unknown_provider_and_a_bad_count():
    with pytest.raises(ElasticGridError, match="provider 'gcp' is not on the grid"):
        reserved("a", {"gcp": 1})
    with pytest.raises(ElasticGridError, match="nodes must be a whole number"):
        reserved("a", {"local": 1.5})  # type: ignore[dict-item]


def test_a_resize_counts_the_larger_of_held_and_reserved_until_confirmed():
    ledger = confirm(reserved("a", {"local": 4}, OLD_LAUNCH), "a", OLD_LAUNCH, now=T0)
    shrinking = reserve(
        ledger, "a", {"local": 2}, launch_id=NEW_LAUNCH, now=T0, capacities=CAPACITIES
    )
    assert job_usage(shrinking, "a") == {"local": 4}  # the old launch may still run
    assert free_nodes(shrinking)["local"] == 0
    done = confirm(shrinking, "a", NEW_LAUNCH, now=T0 + 1)
    assert job_usage(done, "a") == {"local": 2}
    assert {h.phase for h in done.holdings} == {HoldingPhase.HELD}
    assert free_nodes(done)["local"] == 2


def test_confirm_without_a_reservation_is_refused_and_release_frees_everything():
    ledger = reserved("a", {"local": 2})
    with pytest.raises(ElasticGridError, match="no reservation for launch"):
        confirm(ledger, "a", OLD_LAUNCH, now=T0)
    queued = enqueue(ledger, QueuedRequest("a", 4, 2, T0), now=T0)
    released = release(queued, "a", now=T0)
    assert released.holdings == () and released.queue == ()
    assert free_nodes(released) == CAPACITIES | {"aws": 8, "local": 4}


def test_the_queue_is_served_by_priority_then_arrival_and_keeps_a_place():
    ledger = GridLedger()
    ledger = enqueue(ledger, QueuedRequest("late-high", 2, 1, T0 + 20, priority=5), now=T0)
    ledger = enqueue(ledger, QueuedRequest("first", 2, 1, T0), now=T0)
    ledger = enqueue(ledger, QueuedRequest("second", 2, 1, T0 + 10), now=T0)
    assert [r.job for r in queue_order(ledger)] == ["late-high", "first", "second"]
    again = enqueue(ledger, QueuedRequest("first", 3, 1, T0 + 99), now=T0)  # asks again
    assert queue_position(again, "first") == 2
    assert dict((r.job, r.nodes) for r in again.queue)["first"] == 3
    assert queue_position(dequeue(again, "first", now=T0), "first") is None
    request = QueuedRequest("x", 1, 1, T0, timeout_s=60)
    assert not request.expired(T0 + 60) and request.expired(T0 + 61)


def test_reserving_takes_the_job_out_of_the_queue():
    ledger = enqueue(GridLedger(), QueuedRequest("a", 2, 1, T0), now=T0)
    ledger = reserve(ledger, "a", {"local": 2}, launch_id=NEW_LAUNCH, now=T0, capacities=CAPACITIES)
    assert ledger.queue == ()


def test_the_ledger_round_trips_through_json():
    ledger = enqueue(
        reserved("a", {"local": 2, "aws": 1}, priority=3, min_nodes=1),
        QueuedRequest("b", 4, 2, T0, timeout_s=30.0),
        now=T0,
    )
    again = GridLedger.model_validate(json.loads(json.dumps(ledger.model_dump())))
    assert again == ledger
    with pytest.raises(
        ElasticGridError, match=r"grid ledger holdings\.0\.nodes must be at least 1"
    ):
        GridLedger.model_validate(
            {"holdings": [{**ledger.model_dump()["holdings"][0], "nodes": 0}]}
        )


def test_reconcile_confirms_a_reservation_its_launch_record_shows():
    ledger = reserved("a", {"local": 2}, priority=7, min_nodes=1)
    out = reconcile(ledger, {"a": manifest("a", NEW_LAUNCH, {"local": 2})}, now=T0 + 5)
    (holding,) = out.holdings
    assert (holding.phase, holding.nodes, holding.priority, holding.min_nodes) == (
        HoldingPhase.HELD,
        2,
        7,
        1,
    )


@pytest.mark.parametrize("phase", [LaunchPhase.STOPPED, LaunchPhase.DOWN, LaunchPhase.LOST])
def test_a_job_whose_launch_ended_holds_nothing(phase):
    ledger = confirm(reserved("a", {"local": 2}), "a", NEW_LAUNCH, now=T0)
    out = reconcile(ledger, {"a": manifest("a", NEW_LAUNCH, {"local": 2}, phase)}, now=T0 + 5)
    assert out.holdings == ()


def test_a_reservation_no_record_confirms_is_kept_through_the_grace_then_dropped():
    ledger = reserved("a", {"local": 2})
    assert reconcile(ledger, {}, now=T0 + 10, grace_s=60).holdings == ledger.holdings
    assert reconcile(ledger, {}, now=T0 + 61, grace_s=60).holdings == ()


def test_a_reservation_is_dropped_when_the_record_shows_a_later_launch():
    ledger = reserved("a", {"local": 2}, NEW_LAUNCH)
    out = reconcile(ledger, {"a": manifest("a", NEWER_LAUNCH, {"local": 1})}, now=T0 + 1)
    assert [(h.launch_id, h.nodes, h.phase) for h in out.holdings] == [
        (NEWER_LAUNCH, 1, HoldingPhase.HELD)
    ]


def test_a_resize_in_flight_keeps_both_the_running_launch_and_its_reservation():
    ledger = confirm(reserved("a", {"local": 1}, OLD_LAUNCH), "a", OLD_LAUNCH, now=T0)
    ledger = reserve(ledger, "a", {"local": 3}, launch_id=NEW_LAUNCH, now=T0, capacities=CAPACITIES)
    out = reconcile(ledger, {"a": manifest("a", OLD_LAUNCH, {"local": 1})}, now=T0 + 1)
    assert job_usage(out, "a") == {"local": 3}
    assert {h.phase for h in out.holdings} == {HoldingPhase.HELD, HoldingPhase.RESERVED}


def test_an_unreadable_record_keeps_the_jobs_entries():
    ledger = reserved("a", {"local": 2})
    out = reconcile(ledger, {}, now=T0 + 10_000, unreadable={"a"})
    assert out.holdings == ledger.holdings


def test_rebuild_from_records_alone_holds_what_runs_and_never_shrinks_it():
    records = {
        "a": manifest("a", OLD_LAUNCH, {"local": 2, "aws": 3}),
        "b": manifest("b", OLD_LAUNCH, {"local": 1}, LaunchPhase.STARTING),
        "c": manifest("c", OLD_LAUNCH, {"local": 1}, LaunchPhase.STOPPED),
        "d": None,
    }
    out = rebuild(records, now=T0, capacities=CAPACITIES)
    assert {job: job_usage(out, job) for job in out.jobs} == {
        "a": {"aws": 3, "local": 2},
        "b": {"local": 1},
    }
    assert {(h.job, h.priority, h.min_nodes) for h in out.holdings} == {
        ("a", 0, 5),
        ("b", 0, 1),
    }
    assert free_nodes(out) == {"aws": 5, "local": 1}
    assert replace(out, updated_at=0.0) == replace(reconcile(out, records, now=T0), updated_at=0.0)


def test_reconcile_drops_a_queued_request_past_its_timeout():
    ledger = enqueue(GridLedger(), QueuedRequest("gave-up", 2, 1, T0, timeout_s=60), now=T0)
    ledger = enqueue(ledger, QueuedRequest("patient", 2, 1, T0), now=T0)
    assert [r.job for r in reconcile(ledger, {}, now=T0 + 60).queue] == ["gave-up", "patient"]
    assert [r.job for r in reconcile(ledger, {}, now=T0 + 61).queue] == ["patient"]


def test_a_shrink_request_stands_until_the_job_shrank_or_its_asker_stopped_waiting():
    low = manifest("low", OLD_LAUNCH, {"local": 4})
    ledger = rebuild({"low": low}, now=T0, capacities=CAPACITIES)
    ledger = enqueue(ledger, QueuedRequest("high", nodes=2, min_nodes=2, since=T0), now=T0)
    plan = PreemptionPlan("high", (Resize("low", 4, 2, "high"),), nodes_freed=2, granted=2)
    ledger = request_shrinks(ledger, plan, by_priority=5, now=T0)
    asked = shrink_request_for(ledger, "low")
    assert asked is not None and (asked.to_nodes, asked.by_job, asked.by_priority) == (2, "high", 5)
    # still 4 nodes and the asker waits: the request stands, also through JSON
    ledger = GridLedger.model_validate(json.loads(json.dumps(ledger.model_dump())))
    assert shrink_request_for(reconcile(ledger, {"low": low}, now=T0 + 1), "low") == asked
    # the job relaunched at 2 nodes: the request is settled
    shrunk = manifest("low", NEW_LAUNCH, {"local": 2})
    assert shrink_request_for(reconcile(ledger, {"low": shrunk}, now=T0 + 2), "low") is None
    # or the asker no longer waits (served elsewhere, gave up): the request goes too
    gave_up = dequeue(ledger, "high", now=T0 + 3)
    assert shrink_request_for(reconcile(gave_up, {"low": low}, now=T0 + 3), "low") is None
    # and a job that ends takes its requests with it
    assert release(ledger, "low", now=T0 + 4).shrinks == ()


def test_a_queued_request_reads_as_the_claim_the_sharing_rules_take():
    request = QueuedRequest(
        "grow", nodes=6, min_nodes=3, since=T0, priority=2, current_nodes=2, gain_per_node=0.5,
        remaining_s=600.0, restart_s=30.0, deadline_nodes=5,
    )  # fmt: skip
    claim = request.as_claim()
    assert (claim.job, claim.nodes, claim.wanted, claim.min_nodes, claim.priority) == (
        "grow", 2, 6, 3, 2,
    )  # fmt: skip
    assert (claim.gain_per_node, claim.remaining_s, claim.restart_s, claim.deadline_nodes) == (
        0.5, 600.0, 30.0, 5,
    )  # fmt: skip


def test_a_request_its_task_stops_renewing_lapses_and_takes_its_shrink_requests_along():
    low = manifest("low", OLD_LAUNCH, {"local": 4})
    ledger = rebuild({"low": low}, now=T0, capacities=CAPACITIES)
    ledger = enqueue(ledger, QueuedRequest("high", 2, 2, T0, lease_s=120), now=T0)
    plan = PreemptionPlan("high", (Resize("low", 4, 2, "high"),), nodes_freed=2, granted=2)
    ledger = request_shrinks(ledger, plan, by_priority=5, now=T0)
    # renewed at T0 + 100: 120 s later it still waits, and its shrink request stands
    kept = reconcile(renew(ledger, "high", now=T0 + 100), {"low": low}, now=T0 + 220)
    assert [r.job for r in kept.queue] == ["high"]
    assert shrink_request_for(kept, "low") is not None
    # never renewed: one second past its lease it lapsed, and the shrink request went too
    assert lapsed_requests(ledger, T0 + 120) == ()
    assert [r.job for r in lapsed_requests(ledger, T0 + 121)] == ["high"]
    gone = reconcile(ledger, {"low": low}, now=T0 + 121)
    assert gone.queue == () and shrink_request_for(gone, "low") is None


def test_planning_again_renews_the_request_and_keeps_its_place():
    ledger = enqueue(GridLedger(), QueuedRequest("first", 2, 1, T0, lease_s=120), now=T0)
    ledger = enqueue(ledger, QueuedRequest("second", 2, 1, T0 + 1, lease_s=120), now=T0 + 1)
    again = enqueue(ledger, QueuedRequest("first", 2, 1, T0 + 100, lease_s=120), now=T0 + 100)
    first = next(r for r in again.queue if r.job == "first")
    assert (first.since, first.renewed_at) == (T0, T0 + 100)
    assert [r.job for r in queue_order(again)] == ["first", "second"]
    assert [r.job for r in reconcile(again, {}, now=T0 + 200).queue] == ["first"]


def test_renewing_a_job_that_does_not_wait_changes_no_request():
    ledger = enqueue(GridLedger(), QueuedRequest("waits", 2, 1, T0), now=T0)
    assert renew(ledger, "absent", now=T0 + 5).queue == ledger.queue


def test_a_request_stored_before_leases_had_them_gets_the_default_lease():
    request = QueuedRequest.model_validate({"job": "old", "nodes": 2, "min_nodes": 1, "since": T0})
    assert (request.renewed_at, request.lease_s) == (None, DEFAULT_LEASE_S)
    assert not request.lapsed(T0 + DEFAULT_LEASE_S)
    assert request.lapsed(T0 + DEFAULT_LEASE_S + 1)


@pytest.mark.parametrize(("poll_interval", "looks"), [(0.5, 240), (30.0, 4), (90.0, 4)])
def test_a_lease_spans_four_looks_and_never_less_than_two_minutes(poll_interval, looks):
    lease = lease_for(poll_interval)
    assert lease >= 120.0
    assert lease == pytest.approx(looks * poll_interval)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), "60"])
def test_a_lease_must_be_a_positive_number(bad):
    with pytest.raises(ElasticGridError, match=r"^queued request lease_s must be"):
        QueuedRequest("job", 2, 1, T0, lease_s=bad)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("nodes", 0, "capacity request nodes must be at least 1, got 0"),
        ("mode", "later", "capacity request mode must be one of 'wait', 'take_what_fits'"),
        ("lease_s", math.nan, "capacity request lease_s must be a finite number, got nan"),
    ],
)
def test_a_handed_over_capacity_request_is_checked_field_by_field(field, value, message):
    # what a triggerer reads back is the request the plan wrote, a newer minor's fields kept
    written = CapacityRequest("job-a", 2, 1, timeout_s=30.0).model_dump()
    assert CapacityRequest.model_validate({**written, "newer": 1}).model_dump() == {
        **written,
        "newer": 1,
    }
    with pytest.raises(ElasticGridError) as caught:
        CapacityRequest.model_validate({**written, field: value})
    assert str(caught.value).startswith(message)
