"""ElasticScaleSensor on a shared grid: a real grid ledger on disk, real local jobs, real
checks (tests/dags/fleet_scale_dags.py: one grid of 4 local nodes)."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from elasticgrid_provider.core.fleet.ledger import (
    MIN_LEASE_S,
    GridLedger,
    Holding,
    HoldingPhase,
    lease_for,
)
from elasticgrid_provider.core.job import JobManifest
from elasticgrid_provider.hooks.grid_ledger import GridLedgerStore
from tests.airflow_support import DagRunResult, run_dag

pytestmark = pytest.mark.airflow

CAPACITIES = {"local": 4}


def _launch(job: str, nodes: int, dag_id: str = "fleet_launch_sleeping", **conf: Any) -> None:
    result = run_dag(dag_id, {"job_name": job, "nodes": nodes, **conf})
    assert result.task_states == {"plan": "success", "launch": "success"}, result.task_states


def _record(jobs_root: Path, job: str, *, priority: int = 0, min_nodes: int = 0) -> None:
    """Record the job's running launch in the grid ledger with its priority and min_nodes,
    as a fleet-aware launch leaves them once confirmed (held under its launch id)."""
    manifest = JobManifest.model_validate(
        json.loads((jobs_root / job / "manifest.json").read_text())
    )
    with GridLedgerStore(jobs_root).transaction() as grid:
        held = tuple(
            Holding(
                job,
                share.provider.name,
                share.nodes,
                HoldingPhase.HELD,
                manifest.launch_id,
                grid.now,
                priority,
                min_nodes,
            )
            for share in manifest.placement.assignments
        )
        others = tuple(holding for holding in grid.ledger.holdings if holding.job != job)
        grid.ledger = replace(grid.ledger, holdings=others + held, capacities=CAPACITIES)


def _ledger(jobs_root: Path) -> GridLedger:
    return GridLedgerStore(jobs_root).snapshot().ledger


def _samples(
    nodes: int, *, queue_s: float, duration_s: float = 10.0, first: int = 0, count: int = 4
) -> list[dict[str, Any]]:
    """``count`` steps from step ``first`` just measured at ``nodes`` nodes, ``queue_s`` of
    each spent waiting (a check takes only the steps it has not seen)."""
    now = time.time()
    return [
        {
            "step": first + step,
            "duration_s": duration_s,
            "queue_s": queue_s,
            "nodes": nodes,
            "time": now - (count - step) * duration_s,
        }
        for step in range(count)
    ]


QUEUE_BOUND_1 = _samples(1, queue_s=8.0)  # 80% waiting for a worker: it wants more nodes
BALANCED_3 = _samples(3, queue_s=1.0)


def _check(job: str, **conf: Any) -> DagRunResult:
    return run_dag("fleet_scale_check", {"job_name": job, **conf})


def _held_rules(record: dict[str, Any]) -> list[str]:
    return [hold["rule"] for hold in record["held_by"]]


def test_a_scale_up_held_for_capacity_names_the_holder_and_queues_the_claim(airflow_db, jobs_root):
    _launch("big", 3)
    _launch("small", 1)
    _record(jobs_root, "big", min_nodes=3)
    _record(jobs_root, "small", min_nodes=1)

    held = _check("small", samples=QUEUE_BOUND_1, policy={"max_nodes": 4})

    assert held.task_states == {"scale_check": "skipped"}  # a hold: one check, then timeout
    record = held.xcom("scale_check")
    assert (record["action"], record["current_nodes"], record["rule"]) == ("hold", 1, "queue_bound")
    assert _held_rules(record) == ["capacity"]
    assert record["held_by"][0]["reason"] == (
        "the shared grid has no free node for it: job 'small' wants 3 more nodes but 0 are "
        "free: 'big' holds 3 on local"
    )
    assert record["grid"]["holders"] == {"big": {"local": 3}}
    limited = next(c for c in record["conditions"] if c["type"] == "ScalingLimited")
    assert (limited["status"], limited["reason"]) == (True, "GridCapacity")
    queued = _ledger(jobs_root).queue
    assert [(q.job, q.nodes, q.current_nodes) for q in queued] == [("small", 4, 1)]
    # its lease spans four checks of this sensor (poke_interval 1 s): two minutes at least
    assert queued[0].lease_s == lease_for(1.0) == MIN_LEASE_S
    assert queued[0].last_look == queued[0].since  # renewed by the check that queued it

    # balanced now (a whole window of calm steps): it wants no more, so its claim leaves
    calm = _check("small", samples=_samples(1, queue_s=0.5, duration_s=30.0, first=4, count=10))
    assert (calm.xcom("scale_check")["action"], calm.xcom("scale_check")["held_by"]) == (
        "hold",
        [],
    )
    assert _ledger(jobs_root).queue == ()


def test_two_jobs_claims_share_the_nodes_a_finished_job_frees_by_gain(airflow_db, jobs_root):
    from iroh_tinker.cloud import JobManager

    _launch("done-soon", 2, "fleet_launch_finishing", steps=300)  # a few seconds of steps
    _launch("dear", 1)
    _launch("cheap", 1)
    for job in ("done-soon", "dear", "cheap"):
        _record(jobs_root, job, min_nodes=1)
    # the same wish (3 nodes), but a restart costs "dear" 600 s and "cheap" nothing
    dear = {"samples": QUEUE_BOUND_1, "policy": {"max_nodes": 3, "startup_s": 600}}
    cheap = {"samples": QUEUE_BOUND_1, "policy": {"max_nodes": 3}}
    for job, conf in (("dear", dear), ("cheap", cheap)):
        assert _held_rules(_check(job, **conf).xcom("scale_check")) == ["capacity"]
    assert sorted(q.job for q in _ledger(jobs_root).queue) == ["cheap", "dear"]

    manager = JobManager(root=jobs_root)
    deadline = time.monotonic() + 300  # a guard against a hang, not a timing assert
    while manager.status("done-soon--local").status == "running":
        assert time.monotonic() < deadline, "the finishing job never finished"
        time.sleep(0.2)
    ended = _check("done-soon")  # the check that sees it ended releases its 2 nodes
    assert ended.xcom("scale_check")["rule"] == "job_ended"
    assert "done-soon" not in _ledger(jobs_root).jobs

    # both want the 2 freed nodes; "cheap" gains more per node net of the restart price
    waits = _check("dear", **dear).xcom("scale_check")
    assert (waits["action"], _held_rules(waits)) == ("hold", ["capacity"])
    grows = _check("cheap", **cheap)
    assert grows.task_states == {"scale_check": "success"}
    record = grows.xcom("scale_check")
    assert (record["action"], record["current_nodes"], record["target_nodes"]) == (
        "scale_up",
        1,
        3,
    )
    # the claim stays queued until its relaunch reserves the nodes, so "dear" still waits
    assert _held_rules(_check("dear", **dear).xcom("scale_check")) == ["capacity"]


def _deadline_pressed(priority: int, max_nodes: int = 2, steps: int = 1000) -> dict[str, Any]:
    """Far behind: ``steps`` left at 2 s a step on 1 node, 10 minutes to go; it asks for
    ``max_nodes`` (its deadline size within its bounds). 1,000 steps miss the deadline even
    at 4 nodes (hopeless: it shrinks nobody); 400 meet it at 2."""
    deadline = datetime.now(timezone.utc) + timedelta(minutes=10)
    return {
        "samples": _samples(1, queue_s=0.0, duration_s=2.0),
        "deadline": deadline.isoformat(),
        "remaining_steps": steps,
        "priority": priority,
        "policy": {"max_nodes": max_nodes},
    }


def test_a_higher_priority_deadline_pressed_job_preempts_a_lower_one_to_its_min_nodes(
    airflow_db, jobs_root
):
    _launch("batch", 3)
    _launch("urgent", 1)
    _record(jobs_root, "batch", priority=0, min_nodes=2)
    _record(jobs_root, "urgent", priority=5, min_nodes=1)

    asked = _check("urgent", **_deadline_pressed(priority=5, steps=400)).xcom("scale_check")
    assert (asked["action"], asked["rule"]) == ("hold", "deadline_pressure")
    assert _held_rules(asked) == ["capacity"]
    shrinks = _ledger(jobs_root).shrinks
    assert [(s.job, s.to_nodes, s.by_job, s.by_priority) for s in shrinks] == [
        ("batch", 2, "urgent", 5)  # it needs 1 more: batch gives it, down to its min_nodes
    ]

    # batch's own check obeys, though its policy would hold and its cooldown is long
    obeys = _check("batch", samples=BALANCED_3, policy={"cooldown_s": 3600})
    assert obeys.task_states == {"scale_check": "success"}
    record = obeys.xcom("scale_check")
    assert (record["action"], record["current_nodes"], record["target_nodes"]) == (
        "scale_down",
        3,
        2,
    )
    assert (record["rule"], record["preempted_by"]) == ("preempted", "urgent")
    assert "job 'urgent' (priority 5) needs nodes this job holds" in record["reason"]


def test_a_deadline_pressed_job_shrinks_nobody_when_its_deadline_stays_out_of_reach(
    airflow_db, jobs_root
):
    _launch("batch", 3)
    _launch("urgent", 1)
    _record(jobs_root, "batch", priority=0, min_nodes=2)
    _record(jobs_root, "urgent", priority=5, min_nodes=1)
    # even 4 nodes miss its deadline (hopeless); batch could give 1: a restart for nothing
    asked = _check("urgent", **_deadline_pressed(priority=5, max_nodes=4)).xcom("scale_check")
    assert _held_rules(asked) == ["capacity"]
    assert _ledger(jobs_root).shrinks == ()


def test_a_job_of_equal_priority_is_never_shrunk(airflow_db, jobs_root):
    _launch("peer", 3)
    _launch("urgent", 1)
    _record(jobs_root, "peer", priority=5, min_nodes=1)
    _record(jobs_root, "urgent", priority=5, min_nodes=1)

    asked = _check("urgent", **_deadline_pressed(priority=5, steps=400)).xcom("scale_check")
    assert _held_rules(asked) == ["capacity"]
    assert _ledger(jobs_root).shrinks == ()
    kept = _check("peer", samples=BALANCED_3, priority=5).xcom("scale_check")
    assert kept["rule"] != "preempted" and kept["preempted_by"] is None


def test_a_bad_priority_fails_the_check_with_one_sentence(airflow_db, jobs_root, capfd):
    _launch("odd", 1)
    result = _check("odd", samples=QUEUE_BOUND_1, priority="high")
    assert result.task_states == {"scale_check": "failed"}
    output = capfd.readouterr()
    assert "priority must be a number, got 'high'" in output.out + output.err
    assert _check("odd", samples=QUEUE_BOUND_1, priority=2.5).task_states == {
        "scale_check": "failed"
    }
    output = capfd.readouterr()
    assert "priority must be a whole number, got 2.5" in output.out + output.err
