"""The policy benchmark's simulator, on cases small enough to compute by hand."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from benchmarks.report import BenchmarkFailed
from elasticgrid_provider.core.samples import StepSample
from tests.benchmarks import load_bench_policy

bench = load_bench_policy()


def recorder(sizes: dict[float, int] | None = None):
    """A decider that records what it saw and resizes at the given check times."""
    seen: list[tuple[float, int, list[StepSample]]] = []

    def decide(samples: Sequence[StepSample], nodes: int, now: float) -> int:
        seen.append((now, nodes, list(samples)))
        return (sizes or {}).get(now, nodes)

    return decide, seen


def test_step_time_is_the_split_work_plus_the_all_reduce():
    job = bench.BatchJob(
        steps=10, work_s=100.0, comm_s=2.0, deadline_s=1e6, launch_nodes=4, startup_s=0
    )
    assert job.step_s(4) == pytest.approx(25.0 + 2.0 * 2)
    assert job.step_s(1) == pytest.approx(100.0)


def test_a_batch_job_at_a_fixed_size():
    job = bench.BatchJob(
        steps=10, work_s=10.0, comm_s=0.0, deadline_s=100.0, launch_nodes=1, startup_s=10
    )
    decide, seen = recorder()
    outcome = bench.run_batch(job, decide)
    assert (outcome.finished_at, outcome.cost_node_s, outcome.resizes) == (100.0, 100.0, 0)
    assert outcome.met_goal
    # the check at 60 s saw the six steps that ended by then, with their end times
    now, nodes, samples = seen[0]
    assert (now, nodes) == (60.0, 1)
    assert [(s.step, s.time) for s in samples] == [(i, 10.0 * i) for i in range(1, 7)]


def test_a_resize_costs_the_restart_at_the_larger_size_and_the_step_in_flight():
    job = bench.BatchJob(
        steps=10, work_s=10.0, comm_s=0.0, deadline_s=89.0, launch_nodes=1, startup_s=10
    )
    decide, _ = recorder({60.0: 2})
    outcome = bench.run_batch(job, decide)
    # 6 steps by 60 s; restart 60-70 s paid at 2 nodes; 4 steps of 5 s on 2 nodes
    assert outcome.finished_at == pytest.approx(90.0)
    assert outcome.cost_node_s == pytest.approx(60.0 + 2 * 10.0 + 2 * 20.0)
    assert outcome.resizes == 1 and outcome.sizes == [1, 2]
    assert not outcome.met_goal  # 90 s > the 89 s deadline


def test_stream_arrivals_cross_segments():
    job = bench.StreamJob(((10.0, 10.0), (10.0, 20.0)), 100.0, 0.0, 50.0, 1, 0.0)
    # 10 tokens/s for 10 s: batches at 5 and 10 s; then 20/s: at 12.5, 15, 17.5, 20 s
    assert job.arrivals() == pytest.approx([5.0, 10.0, 12.5, 15.0, 17.5, 20.0])
    assert job.segment_at(9.9) == 0 and job.segment_at(10.0) == 1


def test_a_stream_is_served_first_in_first_out():
    # a batch of 10 tokens every second for 10 s (then none until 70 s); one node serves
    # 5 tokens/s: 2 s per batch
    job = bench.StreamJob(((10.0, 10.0), (60.0, 0.0)), 5.0, 0.0, 10.0, 1, 0.0)
    decide, seen = recorder()
    outcome = bench.run_stream(job, decide, latency_s=5.0)
    samples = [sample for _, _, batch in seen for sample in batch]
    waits = [s.queue_s for s in samples[:5]]
    assert waits == pytest.approx([0.0, 1.0, 2.0, 3.0, 4.0])  # batch k waits k - 1 s
    assert samples[0].duration_s == pytest.approx(2.0) and samples[0].time == pytest.approx(3.0)
    # 10 batches, the last ends at 21 s; the job runs until its load ends at 70 s
    assert len(samples) == 10 and samples[-1].time == pytest.approx(21.0)
    assert outcome.cost_node_s == pytest.approx(70.0)
    assert not outcome.met_goal  # waits 0..9 s: 6 of 10 within 5 s, below 95%


def test_direction_changes_within_a_segment_are_counted():
    job = bench.StreamJob(((7200.0, 10.0),), 100.0, 0.0, 100.0, 1, 0.0)
    decide, _ = recorder({60.0: 2, 120.0: 1, 180.0: 2})
    outcome = bench.run_stream(job, decide, latency_s=100.0)
    assert outcome.resizes == 3 and outcome.flaps == 2
    assert outcome.steady_hours == pytest.approx(2.0)


def test_offline_optima():
    batch = bench.BatchJob(
        steps=100, work_s=10.0, comm_s=0.0, deadline_s=400.0, launch_nodes=1, startup_s=50.0
    )
    # 1 node needs 1000 s; 3 nodes: 50 + 333.3 s fits, for 3 * 50 + 1000 node-seconds
    assert bench.batch_optimum(batch, max_nodes=16) == pytest.approx(1150.0)
    stream = bench.StreamJob(((3600.0, 10.0), (3600.0, 30.0)), 10.0, 0.0, 10.0, 1, 100.0)
    # 1 node for an hour, a restart to 3 paid at 3 nodes, 3 nodes for an hour
    assert bench.stream_optimum(stream, max_nodes=16) == pytest.approx(3600 + 300 + 3 * 3600)


def test_the_0_1_0_rules_double_when_queue_bound_and_hold_in_cooldown():
    decide = bench.rules_0_1_0_decider()
    queued = [StepSample(i, 40.0, 30.0, 4, 0.0, 40.0 * i) for i in range(3)]
    assert decide(queued, 4, 1000.0) == 8
    more = [StepSample(i, 40.0, 30.0, 8, 0.0, 40.0 * i) for i in range(3, 6)]
    assert decide(more, 8, 1100.0) == 8  # within the 300 s cooldown


def test_the_benchmark_is_reproducible():
    first = [tally.row() for tally in bench.evaluate(seed=7, jobs_per_kind=2)]
    again = [tally.row() for tally in bench.evaluate(seed=7, jobs_per_kind=2)]
    assert first == again
    assert [row[0] for row in first] == ["policy", "0.1.0 rules", "fixed size"]


def test_resizes_are_recorded_as_check_time_and_new_size():
    job = bench.BatchJob(
        steps=20, work_s=10.0, comm_s=0.0, deadline_s=1e6, launch_nodes=1, startup_s=10
    )
    decide, _ = recorder({60.0: 2, 120.0: 1})
    decisions: dict[str, str] = {}
    bench.run_batch(job, bench.recording(decide, "batch-00", decisions))
    assert decisions == {"batch-00": "60:2 120:1"}


def test_a_changed_decision_fails_against_the_committed_fingerprint():
    (tally,) = bench.evaluate(bench.SEED, bench.JOBS_PER_KIND, first=1, policies=["policy"])
    bench.compare_fingerprint(bench.SEED, tally.decisions, partial=True)  # as committed
    changed = {**tally.decisions, "stream-00": tally.decisions["stream-00"] + " 999960:1"}
    with pytest.raises(BenchmarkFailed) as failure:
        bench.compare_fingerprint(bench.SEED, changed, partial=True)
    message = str(failure.value)
    assert "decisions changed on seed 20261202 in 1 job(s) (stream-00); stream-00:" in message
    assert message.endswith(
        "run python benchmarks/bench_policy.py --update-fingerprint and commit "
        "benchmarks/policy_fingerprint.json with it"
    )


def test_the_stream_optimum_counts_its_size_changes():
    stream = bench.StreamJob(
        ((3600.0, 10.0), (3600.0, 30.0), (3600.0, 10.0)), 10.0, 0.0, 10.0, 1, 100.0
    )
    cost, changes = bench.stream_plan(stream, max_nodes=16)
    assert changes == 2  # up to 3 nodes, back down to 1
    assert cost == pytest.approx(3600 + 300 + 3 * 3600 + 300 + 3600)
    steady = bench.StreamJob(((3600.0, 10.0), (3600.0, 9.0)), 10.0, 0.0, 10.0, 1, 100.0)
    assert bench.stream_plan(steady, max_nodes=16) == (pytest.approx(7200.0), 0)


def test_a_day_misses_its_targets_by_name():
    tally = bench.Tally("policy")
    tally.stream = [bench.Outcome(1.0, 1.0, True, resizes=3)]
    tally.batch = [bench.Outcome(1.0, 1.0, True, resizes=0)]
    tally.ratios = [1.0, 1.10]
    tally.optimum_changes = [2]
    assert tally.missed() == ["3.00 resizes per stream > 2.50"]
    tally.optimum_changes = [3]
    tally.ratios = [1.05, 1.2]
    assert tally.missed() == ["stream median 1.200x > 1.15x", "batch median 1.050x > 1.03x"]
    tally.ratios = [1.0, 1.0]
    assert tally.missed() == [] and tally.kind_row()[-2:] == ["met", "met"]
    tally.batch = [bench.Outcome(1.0, 1.0, False, resizes=0)]
    assert tally.stream_missed() == [] and tally.batch_missed() == ["a deadline was missed"]
