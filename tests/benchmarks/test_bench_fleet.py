"""The fleet benchmark: its quick run's report, no over-subscription, the same seed the same day."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import bench_fleet, fleet_schedulers, fleet_simulator
from benchmarks.policy_simulator import BatchJob
from benchmarks.report import Report


def batch_job(
    name: str, arrival_s: float, launch_nodes: int, priority: int = 0, deadline_s: float = 86400.0
):
    """A job of 10 steps of 60 s at its launch size (no all-reduce), due in a day by default."""
    work = BatchJob(steps=10, work_s=60.0 * launch_nodes, comm_s=0.0, deadline_s=deadline_s,
                    launch_nodes=launch_nodes, startup_s=30.0)  # fmt: skip
    return fleet_simulator.FleetJob(name, arrival_s, priority, 1, work)


def test_fcfs_runs_the_second_job_when_the_first_gives_its_nodes_back():
    jobs = [batch_job("first", 0.0, 4), batch_job("second", 0.0, 4)]
    outcome = fleet_simulator.simulate(jobs, 4, "fcfs")
    first, second = outcome.runs
    # each runs 600 s on 4 nodes; the second starts at the check the first ended by
    assert (first.started_s, first.finished_s) == (0.0, 600.0)
    assert second.started_s == 600.0
    assert first.cost_node_s == second.cost_node_s == pytest.approx(4 * 600.0)
    assert outcome.oversubscribed_checks == 0


def test_a_higher_priority_launch_shrinks_a_lower_job_for_the_size_it_needs_under_sharing():
    # 'high' needs 3 of its 4 nodes for its deadline (10 steps of 80 s in 1000 s)
    jobs = [
        batch_job("low", 0.0, 4, priority=0),
        batch_job("high", 300.0, 4, priority=2, deadline_s=1000.0),
    ]
    outcome = fleet_simulator.simulate(jobs, 4, "sharing")
    high, low = sorted(outcome.runs, key=lambda run: run.job.name)
    assert (high.started_s, high.sizes[0]) == (300.0, 3)  # at once, at its deadline size
    assert low.sizes[:2] == [4, 1]  # shrunk to its min_nodes for it
    assert high.met_goal(fleet_simulator.latency_goal_s())
    assert outcome.oversubscribed_checks == 0


def test_a_lower_job_is_shrunk_only_for_what_the_higher_launch_needs():
    # due in a day, 'high' needs 1 node: 'low' gives up one node, not all it can
    jobs = [batch_job("low", 0.0, 4, priority=0), batch_job("high", 300.0, 4, priority=2)]
    outcome = fleet_simulator.simulate(jobs, 4, "sharing")
    high, low = sorted(outcome.runs, key=lambda run: run.job.name)
    assert (high.started_s, high.sizes[0]) == (300.0, 1)
    assert low.sizes[:2] == [4, 3]
    assert outcome.oversubscribed_checks == 0


def test_the_quick_run_reports_every_scheduler_by_class_without_over_subscription(
    tmp_path: Path,
):
    path = tmp_path / "fleet.json"
    assert bench_fleet.main(["--quick", "--json", str(path)]) == 0
    report = Report.load(path)
    assert (report.name, report.quick) == ("fleet", True)
    by_class, totals, seeds = report.tables
    assert by_class.columns == bench_fleet.CLASS_HEADER
    schedulers = list(fleet_schedulers.SCHEDULERS)
    classes = list(reversed(fleet_simulator.PRIORITY_CLASSES))
    assert [row[:2] for row in by_class.rows] == [[s, c] for s in schedulers for c in classes]
    assert totals.columns == bench_fleet.TOTAL_HEADER
    assert [row[0] for row in totals.rows] == schedulers
    assert all(row[-1] == "0" for row in totals.rows)  # over-subscribed checks
    assert totals.rows[0][3] == "1.00"  # fcfs against itself
    assert any(note.startswith("Target (more goals met") for note in report.notes)
    assert seeds.columns == bench_fleet.SEED_HEADER
    days = [(day, seed) for seed in (bench_fleet.SEED, *bench_fleet.OTHER_SEEDS)
            for day in bench_fleet.DAYS]  # fmt: skip
    assert [tuple(row[:3]) for row in seeds.rows] == [
        (day, str(seed), s) for day, seed in days for s in schedulers
    ]
    assert all(row[-1] == "0" for row in seeds.rows)  # over-subscribed checks, every day

    # the same seed gives the same day, job for job
    again = bench_fleet.evaluate(
        bench_fleet.SEED, bench_fleet.QUICK_JOBS, bench_fleet.QUICK_CAPACITY
    )
    latency_s = fleet_simulator.latency_goal_s()
    fcfs_cost = fleet_simulator.total_cost(again[0])
    assert [bench_fleet.total_row(o, latency_s, fcfs_cost) for o in again] == totals.rows


def test_over_subscription_fails_the_benchmark():
    jobs = [batch_job("a", 0.0, 2)]
    outcome = fleet_simulator.simulate(jobs, 2, "fcfs")
    outcome.oversubscribed_checks, outcome.worst_excess = 1, 3
    with pytest.raises(SystemExit, match="fcfs over-subscribed the grid at 1 checks"):
        bench_fleet.check_outcomes([outcome], 1)


@pytest.mark.parametrize("scheduler", ["fcfs", "quota", "sharing", "reference"])
def test_a_spot_reclaim_stops_the_latest_job_and_it_starts_again_after(scheduler):
    # two 2-node jobs (min 1) of 600 s on 4 nodes; 3 nodes are taken back from 300 s to 1500 s:
    # the jobs give up what is above their min_nodes (1 each), then one of them stops
    jobs = [batch_job("first", 0.0, 2), batch_job("second", 0.0, 2)]
    reclaim = fleet_simulator.Reclaim(300.0, 1500.0, 3)
    outcome = fleet_simulator.simulate(jobs, 4, scheduler, reclaim)
    assert outcome.oversubscribed_checks == 0
    assert sorted(run.job.name for run in outcome.runs) == ["first", "second"]  # one run each
    kept, stopped = sorted(outcome.runs, key=lambda run: run.resizes)
    assert kept.sizes[:2] == [2, 1] and kept.resizes == 1
    assert stopped.resizes >= 2  # shrunk, then stopped, then started again (one run, its cost)
    assert stopped.cost_node_s > kept.cost_node_s
    assert all(run.finished_s is not None for run in outcome.runs)
