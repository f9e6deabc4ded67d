"""The fleet benchmark's simulator: many jobs arriving over a day on one finite grid.

``benchmarks/bench_fleet.py`` runs it and reports. The jobs are the policy
benchmark's (:mod:`benchmarks.policy_simulator`: batch jobs with deadlines and
sub-linear scaling, streams with piecewise arrival rates, a restart per
resize), drawn from a seeded generator, each given an arrival time over one
day, a priority class and a ``min_nodes`` (a quarter of its launch size). A
batch job's deadline and a stream's load count from its arrival: time spent
queued is time lost.

Time advances in checks of ``CHECK_S`` (five minutes: a fleet's sensors poke less
often than the policy benchmark's single job, and the policy costs a few ms a
call). At each check, every running
job has run at its size since the last one (steps or batches with their
samples, exactly as in the policy benchmark); each one asks its own scale
policy for a size, through the same one-transition code as ``bench_policy``
(:func:`policy_decider`, clamped to ``min_nodes`` and the grid); then the
grid's scheduler decides who gets what:

* **fcfs**: first come, first served at the launch size, never resized: the
  head of the queue starts when its launch size is free (no backfill).
* **quota** (Kueue-like): the queue by priority, then arrival (a request that
  does not fit lets the next one try); a launch that does not fit shrinks
  strictly-lower-priority jobs to their ``min_nodes``, lowest priority and
  latest started first; a scale-up is granted whole when it fits, by priority
  then arrival, or held; no gain-based sharing.
* **sharing**: :mod:`elasticgrid_provider.core.fleet.sharing`. The queue by
  priority, and within a priority the jobs that can still meet their deadline
  before those that no longer can, then arrival. A launch needs its
  ``min_nodes``, or, for a batch job, the size its deadline needs if larger
  (which the provider knows at launch); it wants its launch size or that. It
  gets what it wants when that fits (the first launch waiting ahead keeps what
  it will need when the running batch jobs end as their steps left say, and
  only a small need takes the rest; a stream's end counts as unknown, as the
  provider does not know it), or preempts lower priorities for its need, or
  waits. A running job
  behind its deadline may preempt for its deadline size (a stream: the size
  its policy asks for, its latency goal being its deadline, unless more of its
  batches are late already than the goal allows). The rest of the free nodes
  go by the sharing rules: deadline needs first, the waiting launches' needs
  held for them, then throughput net of the restart.

Shrinks are always granted. A resize stops the job for its ``startup_s``
(the step or batch in flight is lost), paid at the larger size; a launch
starts at once, as in the policy benchmark. Cost is node-seconds. Every check
counts the nodes held against the grid's capacity: over-subscription. The schedulers are
in :mod:`benchmarks.fleet_schedulers`.
"""

from __future__ import annotations

import bisect
import functools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from benchmarks.fleet_schedulers import FORESIGHT, SCHEDULERS, STATIC, _deadline_nodes
from benchmarks.policy_simulator import (
    CHECK_INTERVAL_S,
    BatchJob,
    Decider,
    StreamJob,
    make_batch_jobs,
    make_stream_jobs,
    policy_decider,
    scheduler_for,
)
from elasticgrid_provider.core.fleet.sharing import JobClaim, gain_per_node
from elasticgrid_provider.core.samples import StepSample

CHECK_S = 5 * CHECK_INTERVAL_S  # a scale check every 5 minutes (the policy benchmark: every 1)
DAY_S = 24 * 3600.0
GIVE_UP_S = 4 * DAY_S  # a job not done by then missed its goal
PROVIDER = "grid"
PRIORITY_CLASSES = ("low", "normal", "high")  # priority 0, 1, 2
CLASS_WEIGHTS = (0.5, 0.35, 0.15)
BATCH_SHARE = 0.65
LATENCY_SHARE = 0.95  # a stream kept up when this share of batches waited at most latency_s


@dataclass(frozen=True)
class FleetJob:
    """One job of the fleet: its work, when it arrives, its priority and its smallest size."""

    name: str
    arrival_s: float
    priority: int
    min_nodes: int
    work: BatchJob | StreamJob

    @property
    def launch_nodes(self) -> int:
        return self.work.launch_nodes


def make_fleet(seed: int, count: int, capacity: int) -> list[FleetJob]:
    """``count`` jobs arriving over a day, launch sizes at most half the grid."""
    generator = random.Random(seed)
    batch = make_batch_jobs(generator, count)
    streams = make_stream_jobs(generator, count)
    jobs = []
    for number in range(count):
        work: BatchJob | StreamJob = (
            batch[number] if generator.random() < BATCH_SHARE else streams[number]
        )
        work = replace(work, launch_nodes=min(work.launch_nodes, capacity // 2))
        arrival = round(generator.uniform(0.0, DAY_S * 0.8) / CHECK_S) * CHECK_S
        priority = generator.choices(range(len(PRIORITY_CLASSES)), CLASS_WEIGHTS)[0]
        kind = "batch" if isinstance(work, BatchJob) else "stream"
        jobs.append(
            FleetJob(
                f"{kind}-{number:02d}", arrival, priority, max(1, work.launch_nodes // 4), work
            )
        )
    return sorted(jobs, key=lambda job: (job.arrival_s, job.name))


# -- one running job ------------------------------------------------------------------------


@dataclass
class Run:
    """A job once started: its size, its progress and what it has cost."""

    job: FleetJob
    nodes: int
    started_s: float
    decide: Decider | None
    down_until: float = 0.0
    pending: list[StepSample] = field(default_factory=list)
    done: int = 0  # batch: steps done
    progress_s: float = 0.0  # batch: seconds into the step in flight
    index: int = 0  # stream: the next batch
    in_service: tuple[float, float] | None = None
    waits: list[float] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    cost_node_s: float = 0.0
    resizes: int = 0
    sizes: list[int] = field(default_factory=list)  # every size it ran at, in order
    finished_s: float | None = None

    def advance(self, start: float, end: float) -> None:
        """Run from ``start`` to ``end`` at this size (until the job is done)."""
        if isinstance(self.job.work, BatchJob):
            stop = self._batch(self.job.work, max(start, self.down_until), end)
        else:
            stop = self._stream(self.job.work, max(start, self.down_until), end)
        self.cost_node_s += self.nodes * (max(stop, start) - start)

    def _batch(self, job: BatchJob, clock: float, end: float) -> float:
        origin = self.job.arrival_s
        while clock < end:
            length = job.step_s(self.nodes)
            finish = clock + length - self.progress_s
            if finish > end:
                self.progress_s += end - clock
                return end
            self.done += 1
            self.progress_s, clock = 0.0, finish
            self.pending.append(
                StepSample(self.done, length, 0.0, self.nodes, 0.0, finish - origin)
            )
            if self.done >= job.steps:
                self.finished_s = finish
                return finish
        return end

    def _stream(self, job: StreamJob, clock: float, end: float) -> float:
        origin = self.job.arrival_s
        load_ends = origin + job.duration_s
        while True:
            if self.in_service is None:
                if self.index >= len(self.arrivals):
                    if load_ends <= end:
                        self.finished_s = max(clock, load_ends)
                        return self.finished_s
                    return end
                begin = max(clock, origin + self.arrivals[self.index])
                if begin >= end:
                    return end
                self.in_service = (begin, begin + job.batch_tokens / job.capacity(self.nodes))
            begin, finish = self.in_service
            if finish > end:
                return end
            arrived = origin + self.arrivals[self.index]
            self.waits.append(begin - arrived)
            self.pending.append(
                StepSample(self.index, finish - arrived, begin - arrived, self.nodes,
                           job.batch_tokens, finish - origin)
            )  # fmt: skip
            self.index += 1
            self.in_service, clock = None, finish

    def resize(self, nodes: int, now: float) -> None:
        """Restart at ``nodes``: down for ``startup_s``, the work in flight lost."""
        startup = self.job.work.startup_s
        self.cost_node_s += (max(self.nodes, nodes) - nodes) * startup  # the restart's premium
        self.nodes, self.resizes = nodes, self.resizes + 1
        self.sizes.append(nodes)
        self.down_until = now + startup
        self.progress_s, self.in_service = 0.0, None

    def met_goal(self, latency_s: float) -> bool:
        """A batch job done by its deadline; a stream done with 95% of batches in time."""
        if self.finished_s is None:
            return False
        if isinstance(self.job.work, BatchJob):
            return self.finished_s <= self.job.arrival_s + self.job.work.deadline_s + 1e-9
        within = sum(1 for wait in self.waits if wait <= latency_s)
        return bool(self.waits) and within >= LATENCY_SHARE * len(self.waits)

    # -- what the sharing rules are told ---------------------------------------------------

    def _latency_lost(self, now: float) -> bool:
        """A stream whose batches late already (served, or still waiting, past the latency
        goal) exceed the share its goal allows of all its batches."""
        latency_s = latency_goal_s()
        late = sum(1 for wait in self.waits if wait > latency_s)
        overdue = bisect.bisect_right(self.arrivals, now - self.job.arrival_s - latency_s)
        late += max(0, overdue - self.index)
        return late > (1.0 - LATENCY_SHARE) * len(self.arrivals)

    def claim(self, wanted: int, now: float, capacity: int) -> JobClaim:
        """This job's claim on the grid at ``now``, wanting ``wanted`` nodes."""
        work = self.job.work
        if isinstance(work, BatchJob):
            left = work.steps - self.done
            remaining = left * work.step_s(self.nodes)
            time_left = self.job.arrival_s + work.deadline_s - now
            deadline_nodes = _deadline_nodes(work, left, time_left, capacity, self.nodes)
            slack: float | None = -1.0  # no size meets it: hopeless
            if deadline_nodes:
                restart = work.startup_s if deadline_nodes != self.nodes else 0.0
                slack = time_left - restart - left * work.step_s(deadline_nodes)
            else:
                deadline_nodes = max(wanted, self.nodes)
        else:  # the load still to come, or the backlog to serve if that takes longer
            arrived = bisect.bisect_right(self.arrivals, now - self.job.arrival_s)
            backlog_s = (arrived - self.index) * work.batch_tokens / work.capacity(self.nodes)
            remaining = max(self.job.arrival_s + work.duration_s - now, backlog_s, 0.0)
            # its demand is its need (what its policy asks for), unless its latency goal is lost
            deadline_nodes = wanted
            slack = -1.0 if self._latency_lost(now) else None
        return JobClaim(
            job=self.job.name,
            nodes=self.nodes,
            wanted=max(wanted, self.job.min_nodes),
            min_nodes=self.job.min_nodes,
            priority=self.job.priority,
            gain_per_node=_gain(work, self.nodes, wanted),
            remaining_s=remaining,
            ends_in_s=remaining if isinstance(work, BatchJob) else None,  # a stream's: unknown
            restart_s=work.startup_s,
            deadline_nodes=min(deadline_nodes, max(wanted, self.nodes)),
            slack_s=slack,
            since=self.job.arrival_s,
        )


def throughput(work: BatchJob | StreamJob, nodes: int) -> float:
    """Steps (batch) or tokens (stream) per second at ``nodes`` nodes."""
    return 1.0 / work.step_s(nodes) if isinstance(work, BatchJob) else work.capacity(nodes)


def _gain(work: BatchJob | StreamJob, nodes: int, wanted: int) -> float:
    """The marginal efficiency of growing to ``wanted``, from throughput at the two sizes."""
    if wanted <= nodes:
        return 0.0
    return gain_per_node({n: throughput(work, n) for n in (nodes, wanted)}, nodes, wanted)


# -- the day -------------------------------------------------------------------------------


@dataclass
class FleetOutcome:
    """One scheduler's day: every job's run, the grid's busy time, the over-subscription seen."""

    scheduler: str
    capacity: int
    runs: list[Run]
    never_started: list[FleetJob]
    ended_s: float
    busy_node_s: float
    oversubscribed_checks: int
    worst_excess: int

    @property
    def utilisation(self) -> float:
        return self.busy_node_s / (self.capacity * self.ended_s) if self.ended_s else 0.0


@dataclass(frozen=True)
class Reclaim:
    """Spot capacity the cloud takes back for a while: ``nodes`` fewer from ``start_s`` to
    ``end_s``. Whatever the scheduler, the jobs holding the most above their ``min_nodes``
    give nodes up first, then the latest started stop (their work lost, back in the queue)."""

    start_s: float
    end_s: float
    nodes: int

    def capacity_at(self, capacity: int, now: float) -> int:
        return capacity - self.nodes if self.start_s <= now < self.end_s else capacity


def simulate(jobs: Sequence[FleetJob], capacity: int, scheduler: str,
             reclaim: Reclaim | None = None) -> FleetOutcome:  # fmt: skip
    """Run the day under ``scheduler`` until every job is done (or ``GIVE_UP_S``)."""
    arrange = SCHEDULERS[scheduler]
    waiting = sorted(jobs, key=lambda job: (job.arrival_s, job.name))
    queue: list[FleetJob] = []
    runs: list[Run] = []
    active: list[Run] = []
    stopped: dict[str, Run] = {}
    now, busy, excess_checks, worst = 0.0, 0.0, 0, 0
    while (waiting or queue or active) and now < GIVE_UP_S:
        while waiting and waiting[0].arrival_s <= now:
            queue.append(waiting.pop(0))
        grid = reclaim.capacity_at(capacity, now) if reclaim else capacity
        active = _take_back(now, grid, active, queue, stopped)
        wanted = {}
        if scheduler not in STATIC | FORESIGHT:
            for run in active:
                if run.down_until <= now and run.decide is not None:
                    target = run.decide(run.pending, run.nodes, now - run.job.arrival_s)
                    run.pending = []
                    wanted[run.job.name] = min(max(target, run.job.min_nodes), grid)
        for job, nodes in arrange(now, grid, active, wanted, queue):
            queue.remove(job)
            run = Run(
                job,
                nodes,
                now,
                None if scheduler in STATIC | FORESIGHT else _decider(job),
                sizes=[nodes],
            )
            if job.name in stopped:  # started again after a reclaim stopped it
                before = stopped.pop(job.name)
                runs.remove(before)
                run.cost_node_s, run.resizes = before.cost_node_s, before.resizes + 1
                run.started_s = before.started_s
            if isinstance(job.work, StreamJob):
                run.arrivals = job.work.arrivals()
            active.append(run)
            runs.append(run)
        held = sum(run.nodes for run in active)
        if held > grid:
            excess_checks += 1
            worst = max(worst, held - grid)
        end = now + CHECK_S
        for run in active:
            run.advance(now, end)
        busy += held * CHECK_S
        now = end
        active = [run for run in active if run.finished_s is None]
    ended = max([now, *(run.finished_s or now for run in runs)])
    return FleetOutcome(scheduler, capacity, runs, queue + waiting, ended, busy, excess_checks,
                        worst)  # fmt: skip


def _take_back(now: float, grid: int, active: list[Run], queue: list[FleetJob],
               stopped: dict[str, Run]) -> list[Run]:  # fmt: skip
    """The running jobs after a reclaim leaves ``grid`` nodes (:class:`Reclaim`)."""
    excess = sum(run.nodes for run in active) - grid
    if excess <= 0:
        return active
    for run in sorted(active, key=lambda run: (run.job.min_nodes - run.nodes, run.job.name)):
        taken = min(run.nodes - run.job.min_nodes, excess)
        if taken > 0:
            run.resize(run.nodes - taken, now)
            excess -= taken
    kept = []
    for run in sorted(active, key=lambda run: (-run.started_s, run.job.name)):
        if excess > 0:
            excess -= run.nodes
            stopped[run.job.name] = run
            queue.append(run.job)
        else:
            kept.append(run)
    queue.sort(key=lambda job: (job.arrival_s, job.name))
    return sorted(kept, key=lambda run: (run.started_s, run.job.name))


def _decider(job: FleetJob) -> Decider:
    """The job's own scale policy, as ``bench_policy`` runs it (deadline and steps for batch)."""
    work = job.work
    if isinstance(work, StreamJob):
        return policy_decider(scheduler_for(work.startup_s))
    progress = {"done": 0}
    inner = policy_decider(
        scheduler_for(work.startup_s),
        deadline_at=work.deadline_s,
        remaining=lambda: float(work.steps - progress["done"]),
    )

    def decide(samples: Sequence[StepSample], nodes: int, now: float) -> int:
        if samples:
            progress["done"] = samples[-1].step
        return inner(samples, nodes, now)

    return decide


@functools.cache
def latency_goal_s() -> float:
    """A stream's latency goal: the scale policy's ``drain_s``, as in ``bench_policy``."""
    return float(scheduler_for(60.0).drain_s)


def total_cost(outcome: FleetOutcome) -> float:
    return math.fsum(run.cost_node_s for run in outcome.runs)
