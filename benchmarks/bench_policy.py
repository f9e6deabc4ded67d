"""Benchmark: the scale policy against the 0.1.0 rules, a fixed size and each job's optimum.

Run with ``make bench-policy`` (``python benchmarks/bench_policy.py [--seed S]
[--jobs N]``). The jobs, the policies and the offline optimum are simulated by
:mod:`benchmarks.policy_simulator`, from a seeded generator: a run is
reproducible.

Reported per policy: batch deadlines met; streams that kept up (95% of
batches waited at most the scheduler's ``drain_s``); cost against the
optimum (median and mean over all jobs); resizes per job (mean and max);
changes of direction per hour of steady load (a resize in the other
direction from the previous one, within one load segment: mean over streams,
worst stream). The published run adds the policy alone on ``OTHER_SEEDS``.

**The fingerprint.** Every resize the policy decides (job, check time, new
size) on each seed of the published run is committed in
``benchmarks/policy_fingerprint.json``, and the benchmark fails when one
differs, naming the job. A change to the policy (or to the simulator) that
changes a decision is therefore a deliberate one: run
``python benchmarks/bench_policy.py --update-fingerprint`` and commit the file
with the change. ``--quick`` checks the first ``QUICK_JOBS`` jobs of each
kind of the main seed.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.policy_simulator import (
    CHECK_INTERVAL_S,
    MAX_NODES,
    MIN_NODES,
    BatchJob,
    Decider,
    Outcome,
    StreamJob,
    batch_optimum,
    fixed_decider,
    make_batch_jobs,
    make_stream_jobs,
    policy_decider,
    rules_0_1_0_decider,
    run_batch,
    run_stream,
    scheduler_for,
    stream_optimum,
    stream_plan,
)
from benchmarks.report import Report, Table, arguments, check, fail
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.samples import StepSample

__all__ = [
    "BatchJob",
    "Outcome",
    "StreamJob",
    "batch_optimum",
    "rules_0_1_0_decider",
    "run_batch",
    "run_stream",
    "stream_optimum",
    "stream_plan",
]  # the simulator names the tests use

SEED = 20261202
OTHER_SEEDS = (1, 2, 3, 4, 5)
STREAM_DAYS = (11, 12)
"""Seeds of the days where most jobs are streams (``STREAM_DAY_BATCH_JOBS`` batch jobs)."""
STREAM_DAY_BATCH_JOBS = 8
STREAM_TARGET = 1.15  # streams' median cost against the optimum
EXTRA_RESIZES = 0.5  # resizes per stream beyond the optimum's own size changes
BATCH_TARGET = 1.03  # batch jobs' median cost against the optimum
JOBS_PER_KIND = 40
QUICK_JOBS = 4
POLICIES = ("policy", "0.1.0 rules", "fixed size")
FINGERPRINT = Path(__file__).with_name("policy_fingerprint.json")
SHOWN = f"benchmarks/{FINGERPRINT.name}"  # as messages name it
UPDATE_COMMAND = "python benchmarks/bench_policy.py --update-fingerprint"


@dataclass
class Tally:
    """One policy's outcomes over all jobs, and its resizes job by job."""

    name: str
    batch: list[Outcome] = field(default_factory=list)
    stream: list[Outcome] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    decisions: dict[str, str] = field(default_factory=dict)
    optimum_changes: list[int] = field(default_factory=list)
    """The offline optimum's size changes, stream by stream."""

    def kinds(self) -> tuple[list[float], list[float]]:
        """The cost ratios of the batch jobs and of the streams."""
        return self.ratios[: len(self.batch)], self.ratios[len(self.batch) :]

    def kind_row(self) -> list[str]:
        """Batch jobs and streams apart: the targets' figures, then the verdict."""
        batch, streams = self.kinds()
        met = sum(outcome.met_goal for outcome in self.batch)
        kept = sum(outcome.met_goal for outcome in self.stream)
        resizes = statistics.fmean(o.resizes for o in self.stream) if self.stream else 0.0
        changes = statistics.fmean(self.optimum_changes) if self.optimum_changes else 0.0
        return [
            f"{_median(batch):.3f}x",
            f"{_p90(batch):.3f}x",
            f"{met}/{len(self.batch)}",
            f"{_median(streams):.3f}x",
            f"{_p90(streams):.3f}x",
            f"{resizes:.2f}",
            f"{changes:.2f}",
            f"{kept}/{len(self.stream)}",
            _verdict(self.stream_missed()),
            _verdict(self.batch_missed()),
        ]

    def row(self) -> list[str]:
        outcomes = self.batch + self.stream
        resizes = [outcome.resizes for outcome in outcomes]
        rates = [o.flaps / o.steady_hours for o in self.stream if o.steady_hours > 0]
        met = sum(outcome.met_goal for outcome in self.batch)
        kept = sum(outcome.met_goal for outcome in self.stream)
        return [
            self.name,
            f"{met}/{len(self.batch)} ({met / max(len(self.batch), 1):.0%})",
            f"{kept}/{len(self.stream)} ({kept / max(len(self.stream), 1):.0%})",
            f"{statistics.median(self.ratios):.2f}x",
            f"{statistics.fmean(self.ratios):.2f}x",
            f"{statistics.fmean(resizes):.2f}",
            str(max(resizes)),
            f"{statistics.fmean(rates):.2f}" if rates else "-",
            f"{max(rates):.2f}" if rates else "-",
        ]

    def missed(self) -> list[str]:
        """The targets this day missed (empty: every target met)."""
        return self.stream_missed() + self.batch_missed()

    def stream_missed(self) -> list[str]:
        """The streams' targets this day missed."""
        _, streams = self.kinds()
        missed = []
        if streams and _median(streams) > STREAM_TARGET:
            missed.append(f"stream median {_median(streams):.3f}x > {STREAM_TARGET}x")
        if self.stream:
            resizes = statistics.fmean(o.resizes for o in self.stream)
            allowed = statistics.fmean(self.optimum_changes) + EXTRA_RESIZES
            if resizes > allowed:
                missed.append(f"{resizes:.2f} resizes per stream > {allowed:.2f}")
        if not all(o.met_goal for o in self.stream):
            missed.append("a stream fell behind")
        return missed

    def batch_missed(self) -> list[str]:
        """The batch jobs' targets this day missed."""
        batch, _ = self.kinds()
        missed = []
        if batch and _median(batch) > BATCH_TARGET:
            missed.append(f"batch median {_median(batch):.3f}x > {BATCH_TARGET}x")
        if not all(o.met_goal for o in self.batch):
            missed.append("a deadline was missed")
        return missed


def _verdict(missed: list[str]) -> str:
    return "met" if not missed else "MISSED: " + "; ".join(missed)


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0


def _p90(values: Sequence[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]


KIND_HEADER = [
    "day (this policy)",
    "batch cost/opt median",
    "p90",
    "deadlines met",
    "stream cost/opt median",
    "p90",
    "resizes/stream",
    "optimum's size changes/stream",
    "streams kept up",
    "streams' targets",
    "batch targets",
]

HEADER = [
    "policy",
    "deadlines met",
    "streams kept up",
    "cost/opt median",
    "cost/opt mean",
    "resizes/job mean",
    "max",
    "dir. changes/steady h mean",
    "max",
]


def recording(decide: Decider, key: str, decisions: dict[str, str]) -> Decider:
    """``decide``, writing each resize it decides to ``decisions[key]`` as ``time:size``."""
    decisions[key] = ""

    def recorded(samples: Sequence[StepSample], nodes: int, now: float) -> int:
        wanted = decide(samples, nodes, now)
        if wanted != nodes:
            moment = f"{now:.3f}".rstrip("0").rstrip(".")
            decisions[key] = f"{decisions[key]} {moment}:{wanted}".lstrip()
        return wanted

    return recorded


def evaluate(
    seed: int,
    jobs_per_kind: int,
    *,
    first: int | None = None,
    policies: Sequence[str] = POLICIES,
    batch_count: int | None = None,
) -> list[Tally]:
    """Run every job (or the ``first`` of each kind) under each policy; tallies in report order.
    ``batch_count``: fewer batch jobs than streams (a day where most jobs are streams)."""
    generator = random.Random(seed)
    batch_jobs = make_batch_jobs(generator, jobs_per_kind)[:first]
    stream_jobs = make_stream_jobs(generator, jobs_per_kind)[:first]
    if batch_count is not None:
        batch_jobs = batch_jobs[:batch_count]
    latency_s = ScalePolicy().drain_s
    tallies = {name: Tally(name) for name in policies}
    for number, job in enumerate(batch_jobs):
        optimum = batch_optimum(job)
        for name, tally in tallies.items():
            outcome = _run_batch_with(name, job, number, seed, tally.decisions)
            tally.batch.append(outcome)
            tally.ratios.append(outcome.cost_node_s / optimum)
    for number, stream in enumerate(stream_jobs):
        optimum, changes = stream_plan(stream)
        for name, tally in tallies.items():
            tally.optimum_changes.append(changes)
            if name == "policy":
                inner = policy_decider(scheduler_for(stream.startup_s))
            elif name == "0.1.0 rules":
                inner = rules_0_1_0_decider()
            else:
                inner = fixed_decider()
            decide = recording(inner, f"stream-{number:02d}", tally.decisions)
            outcome = run_stream(stream, decide, latency_s=latency_s)
            tally.stream.append(outcome)
            tally.ratios.append(outcome.cost_node_s / optimum)
    return list(tallies.values())


def _run_batch_with(
    name: str, job: BatchJob, number: int, seed: int, decisions: dict[str, str]
) -> Outcome:
    progress = {"done": 0}
    if name == "policy":
        inner = policy_decider(
            scheduler_for(job.startup_s),
            deadline_at=job.deadline_s,
            remaining=lambda: float(job.steps - progress["done"]),
        )
    elif name == "0.1.0 rules":
        inner = rules_0_1_0_decider()
    else:
        inner = fixed_decider()
    recorded = recording(inner, f"batch-{number:02d}", decisions)

    def decide(samples: Sequence[StepSample], nodes: int, now: float) -> int:
        if samples:
            progress["done"] = samples[-1].step
        return recorded(samples, nodes, now)

    return run_batch(job, decide, noise_seed=seed + number)


def check_baselines(tallies: list[Tally], jobs: int) -> None:
    """Every policy ran every job; the fixed size never resized and the 0.1.0 rules did."""
    by_name = {tally.name: tally for tally in tallies}
    for tally in tallies:
        check(
            len(tally.batch) == len(tally.stream) == jobs or len(tally.stream) == jobs,
            f"{tally.name} ran {len(tally.batch)} batch jobs and {len(tally.stream)} streams, "
            f"not {jobs} of each",
        )
        check(all(r > 0 for r in tally.ratios), f"{tally.name}: a job's cost or optimum is 0")
    if "fixed size" in by_name:
        check(not any(by_name["fixed size"].decisions.values()), "the fixed-size baseline resized")
    if "0.1.0 rules" in by_name:
        check(
            any(by_name["0.1.0 rules"].decisions.values()),
            "the 0.1.0 rules baseline never resized a job: it did not really run",
        )


def read_fingerprint() -> dict[str, dict[str, str]]:
    """The committed decisions by seed (as a string), each by job key."""
    if not FINGERPRINT.exists():
        fail(f"{SHOWN} is missing: run {UPDATE_COMMAND}")
    data = json.loads(FINGERPRINT.read_text())
    check(data.get("jobs_per_kind") == JOBS_PER_KIND,
          f"{SHOWN} was written for {data.get('jobs_per_kind')} jobs per kind, not "
          f"{JOBS_PER_KIND}: run {UPDATE_COMMAND}")  # fmt: skip
    return dict(data["seeds"])


def compare_fingerprint(seed: int, decisions: dict[str, str], *, partial: bool = False) -> None:
    """Fail, naming the jobs, when the policy's decisions differ from the committed ones."""
    expected = read_fingerprint().get(str(seed))
    if expected is None:
        fail(f"{SHOWN} has no decisions for seed {seed}: run {UPDATE_COMMAND}")
    keys = sorted(decisions) if partial else sorted({*decisions, *expected})
    changed = [key for key in keys if decisions.get(key) != expected.get(key)]
    if changed:
        key = changed[0]
        fail(
            f"the policy's decisions changed on seed {seed} in {len(changed)} job(s) "
            f"({', '.join(changed[:5])}{', ...' if len(changed) > 5 else ''}); {key}: "
            f"committed {expected.get(key)!r}, now {decisions.get(key)!r}. If the change is "
            f"deliberate, run {UPDATE_COMMAND} and commit {SHOWN} with it"
        )


def update_fingerprint() -> int:
    """Write the policy's decisions on every published seed; say how many jobs changed."""
    old = read_fingerprint() if FINGERPRINT.exists() else {}
    seeds: dict[str, dict[str, str]] = {}
    for seed in (SEED, *OTHER_SEEDS):
        (tally,) = evaluate(seed, JOBS_PER_KIND, policies=("policy",))
        seeds[str(seed)] = dict(sorted(tally.decisions.items()))
    changed = sum(
        old.get(seed, {}).get(key) != value
        for seed, decisions in seeds.items()
        for key, value in decisions.items()
    )
    document = {
        "about": "The scale policy's resizes (check time in s: new size) per simulated job, by "
        f"seed; benchmarks/bench_policy.py fails when they differ. Update: {UPDATE_COMMAND}",
        "jobs_per_kind": JOBS_PER_KIND,
        "seeds": seeds,
    }
    FINGERPRINT.write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {SHOWN}: {changed} job decision record(s) changed")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = arguments(__doc__)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--jobs", type=int, default=JOBS_PER_KIND, help="jobs of each kind")
    parser.add_argument(
        "--update-fingerprint",
        action="store_true",
        help=f"write {SHOWN} from the policy's decisions now",
    )
    args = parser.parse_args(argv)
    if args.update_fingerprint:
        return update_fingerprint()
    published = args.seed == SEED and args.jobs == JOBS_PER_KIND
    first = QUICK_JOBS if args.quick else None
    jobs = min(first or args.jobs, args.jobs)
    tallies = evaluate(args.seed, args.jobs, first=first)
    check_baselines(tallies, jobs)
    fingerprinted = str(args.seed) in read_fingerprint() and args.jobs == JOBS_PER_KIND
    if fingerprinted:
        compare_fingerprint(args.seed, tallies[0].decisions, partial=args.quick)
    report = Report(
        "policy",
        "Scale policy against the 0.1.0 rules, a fixed size and the offline optimum",
        f"{jobs} simulated batch jobs with deadlines and {jobs} streams with piecewise arrival "
        f"rates, sub-linear scaling and a restart cost; a check every {CHECK_INTERVAL_S:.0f} s, "
        f"sizes {MIN_NODES}..{MAX_NODES}. Cost is in node-seconds against each job's offline "
        "optimum (computed alongside, a lower bound), so every cost figure is a ratio.",
        tables=[Table(HEADER, [tally.row() for tally in tallies])],
        quick=args.quick,
        settings=f"seed {args.seed}, {jobs} jobs of each kind"
        + (f" (the first of {args.jobs})" if args.quick else ""),
    )
    days = [(f"seed {args.seed}", tallies[0])]
    if published and not args.quick:
        rows = []
        for seed in OTHER_SEEDS:
            (tally,) = evaluate(seed, JOBS_PER_KIND, policies=("policy",))
            check_baselines([tally], JOBS_PER_KIND)
            compare_fingerprint(seed, tally.decisions)
            rows.append([str(seed), *tally.row()[1:]])
            days.append((f"seed {seed}", tally))
        report.tables.append(Table(["seed (this policy)", *HEADER[1:]], rows))
        report.notes.append(
            "The second table: this policy alone on other seeds (the workload generator and "
            "the comparisons unchanged)."
        )
        for seed in STREAM_DAYS:
            (tally,) = evaluate(
                seed, JOBS_PER_KIND, policies=("policy",), batch_count=STREAM_DAY_BATCH_JOBS
            )
            check_baselines([tally], JOBS_PER_KIND)
            days.append((f"seed {seed}, mostly streams", tally))
    report.tables.append(Table(KIND_HEADER, [[day, *tally.kind_row()] for day, tally in days]))
    report.notes.append(
        f"The last table: batch jobs and streams apart, day by day. Targets: streams' median "
        f"cost <= {STREAM_TARGET}x the optimum, resizes per stream <= the optimum's own size "
        f"changes + {EXTRA_RESIZES}, every stream kept up; batch jobs' median <= "
        f"{BATCH_TARGET}x, every deadline met. The mostly-stream days ({STREAM_DAY_BATCH_JOBS} "
        f"batch jobs, {JOBS_PER_KIND} streams) are not in the fingerprint."
    )
    stream_days = [day for day, tally in days if not tally.stream_missed()]
    batch_days = [day for day, tally in days if not tally.batch_missed()]
    report.notes.append(
        f"Verdict: the streams' targets met on {len(stream_days)} of {len(days)} days, the "
        f"batch jobs' on {len(batch_days)} of {len(days)}"
        + (
            "."
            if len(stream_days) == len(batch_days) == len(days)
            else "; missed as the table says."
        )
    )
    report.notes.append(
        f"Decisions identical, job for job, to the committed fingerprint ({SHOWN})."
        if fingerprinted
        else f"No fingerprint for seed {args.seed} at {args.jobs} jobs per kind: not compared."
    )
    report.publish(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
