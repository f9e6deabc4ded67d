"""The policy benchmark's simulator: seeded jobs, the policies it compares, their optima.

``benchmarks/bench_policy.py`` runs it and reports. Every job is drawn from a
seeded generator, so a run is reproducible.

The simulated jobs (see :class:`BatchJob` and :class:`StreamJob`):

* **Batch jobs with a deadline.** ``steps`` training steps; a step on ``n``
  nodes takes ``work_s / n + comm_s * log2(n)`` seconds (the all-reduce grows
  with the log of the node count: sub-linear scaling). The deadline is
  reachable at some size; the job is launched at a size that may be too small
  or too large.
* **Streaming jobs.** Work arrives at a piecewise-constant rate (tokens per
  second, each segment one to two hours of steady load) in batches of
  ``batch_tokens``; ``n`` nodes serve ``n * node_rate / (1 + beta * log2(n))``
  tokens per second, first in first out. A batch's sample has ``queue_s`` =
  time it waited for a worker, ``duration_s`` = wait + service, ``time`` =
  when it finished.

Every resize stops the job for ``startup_s``: no progress (the step or batch
in flight is lost and redone), paid at the larger of the two sizes. Cost is
node-seconds. Every ``CHECK_INTERVAL_S`` a scale check sees the samples that
finished since the last check, exactly as the sensor does:

* **policy**: :meth:`ScaleState.advance` with :class:`ScalePolicy` (the
  real scheduler through the sensor's transition), with the sensor's
  defaults plus ``min_nodes=1``, ``max_nodes=256``, the job's ``startup_s``,
  and for batch jobs the deadline and remaining steps;
* **0.1.0**: the rules of release 0.1.0 re-implemented here (x2 on queueing,
  x0.5 on short steps, a cooldown, no deadline rule beyond "no time left");
* **fixed**: the launch size, never resized.

The **offline optimum** knows the whole job in advance and starts from the
same launch size: for a batch job, the cheapest single size (switched to at
time 0, paying one restart, or the launch size itself) that meets the
deadline; for a stream, a dynamic programme over the load segments choosing
each segment's size among the smallest sizes that serve some segment's rate,
paying ``max(n, m) * startup_s`` per change. It ignores queueing noise, so
it is a lower bound.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.samples import MetricsWindow, StepSample
from elasticgrid_provider.core.state import ScaleState

CHECK_INTERVAL_S = 60.0
WINDOW_SIZE = 10
MIN_NODES = 1
MAX_NODES = 256
LATENCY_SHARE = 0.95

Decider = Callable[[Sequence[StepSample], int, float], int]
"""Given the samples since the last check, the current size and the time: the size wanted."""


# -- the jobs ---------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchJob:
    """A training job of ``steps`` steps that must finish by ``deadline_s`` (from its start)."""

    steps: int
    work_s: float
    comm_s: float
    deadline_s: float
    launch_nodes: int
    startup_s: float

    def step_s(self, nodes: int) -> float:
        """Seconds one step takes on ``nodes`` nodes: perfect split plus the all-reduce."""
        return self.work_s / nodes + self.comm_s * math.log2(nodes)


@dataclass(frozen=True)
class StreamJob:
    """A stream: ``segments`` of (seconds, tokens per second), served in batches."""

    segments: tuple[tuple[float, float], ...]
    node_rate: float
    beta: float
    batch_tokens: float
    launch_nodes: int
    startup_s: float

    @property
    def duration_s(self) -> float:
        return sum(length for length, _ in self.segments)

    def capacity(self, nodes: int) -> float:
        """Tokens per second ``nodes`` nodes serve."""
        return nodes * self.node_rate / (1.0 + self.beta * math.log2(nodes))

    def segment_at(self, moment: float) -> int:
        """The index of the load segment running at ``moment``."""
        start = 0.0
        for index, (length, _) in enumerate(self.segments):
            if moment < start + length:
                return index
            start += length
        return len(self.segments) - 1

    def arrivals(self) -> list[float]:
        """When each batch has fully arrived (the cumulative arrivals reach k batches)."""
        times: list[float] = []
        start = 0.0
        carried = 0.0  # tokens of the next batch that arrived in earlier segments
        for length, rate in self.segments:
            moment = start
            end = start + length
            while True:
                needed = self.batch_tokens - carried
                if rate <= 0 or moment + needed / rate > end:
                    carried += rate * (end - moment)
                    break
                moment += needed / rate
                times.append(moment)
                carried = 0.0
            start = end
        return times


# -- the simulation ---------------------------------------------------------------------


@dataclass
class Outcome:
    """What happened to one job under one policy."""

    cost_node_s: float
    finished_at: float
    met_goal: bool
    resizes: int
    flaps: int = 0
    steady_hours: float = 0.0
    sizes: list[int] = field(default_factory=list)


def run_batch(job: BatchJob, decide: Decider, *, noise_seed: int | None = None) -> Outcome:
    """Run ``job`` with a scale check every ``CHECK_INTERVAL_S``; steps are atomic.

    A resize decided at ``t`` loses the step in flight, stops the job until
    ``t + startup_s`` (paid at the larger size) and resumes at the new size.
    ``noise_seed`` jitters step times by up to 3% (``None``: exact).
    """
    jitter = random.Random(noise_seed) if noise_seed is not None else None
    nodes, done, clock, cost, resizes = job.launch_nodes, 0, 0.0, 0.0, 0
    step_started = 0.0
    step_length = _step_length(job, nodes, jitter)
    next_check = CHECK_INTERVAL_S
    pending: list[StepSample] = []
    sizes = [nodes]
    give_up = job.deadline_s * 20 + 1e6
    while done < job.steps and clock < give_up:
        step_end = step_started + step_length
        if step_end <= next_check:
            cost += nodes * (step_end - clock)
            clock = step_end
            done += 1
            pending.append(StepSample(done, step_length, 0.0, nodes, 0.0, clock))
            step_started = clock
            step_length = _step_length(job, nodes, jitter)
            continue
        cost += nodes * (next_check - clock)
        clock = next_check
        wanted = decide(pending, nodes, clock)
        pending = []
        next_check += CHECK_INTERVAL_S
        if wanted != nodes:
            resizes += 1
            cost += max(nodes, wanted) * job.startup_s
            clock += job.startup_s
            nodes = wanted
            sizes.append(nodes)
            step_started = clock  # the step in flight is lost and redone
            step_length = _step_length(job, nodes, jitter)
            while next_check <= clock:
                next_check += CHECK_INTERVAL_S
    met = done >= job.steps and clock <= job.deadline_s + 1e-9
    return Outcome(cost, clock, met, resizes, sizes=sizes)


def _step_length(job: BatchJob, nodes: int, jitter: random.Random | None) -> float:
    base = job.step_s(nodes)
    return base * (1.0 + jitter.uniform(-0.03, 0.03)) if jitter is not None else base


def run_stream(job: StreamJob, decide: Decider, *, latency_s: float) -> Outcome:
    """Serve ``job``'s batches first in first out, with a scale check every ``CHECK_INTERVAL_S``.

    The job runs until its last segment ends and its backlog is served. A
    resize loses the batch in service (it is served again), and serves
    nothing for ``startup_s``, paid at the larger size. The goal is met when
    at least 95% of batches waited at most ``latency_s``.
    """
    arrivals = job.arrivals()
    nodes, clock, cost, resizes = job.launch_nodes, 0.0, 0.0, 0
    next_check = CHECK_INTERVAL_S
    pending: list[StepSample] = []
    sizes = [nodes]
    waits: list[float] = []
    changes: list[tuple[float, int]] = []  # (time, direction)
    available_at = 0.0  # the server is down (restarting) until then
    index = 0
    in_service: tuple[float, float] | None = None  # (start, end) of the batch in service
    end_of_load = job.duration_s
    while index < len(arrivals) or clock < end_of_load:
        if in_service is None and index < len(arrivals):
            start = max(clock, arrivals[index], available_at)
            in_service = (start, start + job.batch_tokens / job.capacity(nodes))
        if in_service is None and end_of_load <= next_check:
            # nothing left to serve: the job runs until its load ends
            cost += nodes * max(end_of_load - clock, 0.0)
            clock = max(clock, end_of_load)
            break
        finish = in_service[1] if in_service is not None else math.inf
        if finish <= next_check:
            assert in_service is not None
            cost += nodes * (finish - clock)
            clock = finish
            arrived = arrivals[index]
            queue = in_service[0] - arrived
            waits.append(queue)
            pending.append(
                StepSample(index, finish - arrived, queue, nodes, job.batch_tokens, finish)
            )
            index += 1
            in_service = None
            continue
        cost += nodes * (next_check - clock)
        clock = next_check
        wanted = decide(pending, nodes, clock)
        pending = []
        next_check += CHECK_INTERVAL_S
        if wanted != nodes:
            resizes += 1
            changes.append((clock, 1 if wanted > nodes else -1))
            cost += max(nodes, wanted) * job.startup_s
            available_at = clock + job.startup_s
            clock = available_at
            nodes = wanted
            sizes.append(nodes)
            in_service = None  # lost: served again after the restart
            while next_check <= clock:
                next_check += CHECK_INTERVAL_S
    flaps = sum(
        1
        for (earlier, before), (later, after) in itertools.pairwise(changes)
        if before != after and job.segment_at(earlier) == job.segment_at(later)
    )
    within = sum(1 for wait in waits if wait <= latency_s)
    met = bool(waits) and within >= LATENCY_SHARE * len(waits)
    return Outcome(
        cost,
        clock,
        met,
        resizes,
        flaps=flaps,
        steady_hours=job.duration_s / 3600.0,
        sizes=sizes,
    )


# -- the offline optimum ----------------------------------------------------------------


def batch_optimum(job: BatchJob, max_nodes: int = MAX_NODES) -> float:
    """The cheapest node-seconds that finish by the deadline from the launch size.

    Either stay at the launch size, or switch at time 0 to one size (one
    restart at the larger size). When no size meets the deadline: the
    fastest schedule's cost.
    """
    best = math.inf
    fastest = (math.inf, math.inf)  # (finish, cost)
    for nodes in range(1, max_nodes + 1):
        run_s = job.steps * job.step_s(nodes)
        if nodes == job.launch_nodes:
            finish, cost = run_s, nodes * run_s
        else:
            finish = job.startup_s + run_s
            cost = max(nodes, job.launch_nodes) * job.startup_s + nodes * run_s
        if finish <= job.deadline_s:
            best = min(best, cost)
        fastest = min(fastest, (finish, cost))
    return best if math.isfinite(best) else fastest[1]


def stream_optimum(job: StreamJob, max_nodes: int = MAX_NODES) -> float:
    """The cheapest node-seconds that serve every segment's rate, from the launch size."""
    return stream_plan(job, max_nodes)[0]


def stream_plan(job: StreamJob, max_nodes: int = MAX_NODES) -> tuple[float, int]:
    """The optimum's cost (:func:`stream_optimum`) and its number of size changes (the fewest
    among the cheapest schedules): the resizes a stream's demand calls for."""
    needs = [_smallest_serving(job, rate, max_nodes) for _, rate in job.segments]
    candidates = sorted({job.launch_nodes, *needs})

    def moved(before: int, size: int) -> tuple[float, int]:
        if before == size:
            return 0.0, 0
        return max(before, size) * job.startup_s, 1

    # best[c] = (cheapest cost so far ending at size c, its fewest changes)
    best = {size: moved(job.launch_nodes, size) for size in candidates}
    for (length, _), need in zip(job.segments, needs, strict=True):
        step: dict[int, tuple[float, int]] = {}
        for size in candidates:
            if size < need:
                continue
            cost, changes = min(
                (best[before][0] + moved(before, size)[0], best[before][1] + moved(before, size)[1])
                for before in candidates
                if before in best
            )
            step[size] = (cost + size * length, changes)
        best = step
    return min(best.values())


def _smallest_serving(job: StreamJob, rate: float, max_nodes: int) -> int:
    for nodes in range(1, max_nodes + 1):
        if job.capacity(nodes) >= rate:
            return nodes
    return max_nodes


# -- the policies -----------------------------------------------------------------------


def policy_decider(
    scheduler: ScalePolicy,
    *,
    deadline_at: float | None = None,
    remaining: Callable[[], float] | None = None,
) -> Decider:
    """The real scheduler through the sensor's transition (observe -> decide -> remember)."""
    state = ScaleState(job_name="bench")

    def decide(samples: Sequence[StepSample], nodes: int, now: float) -> int:
        nonlocal state
        state, record = state.advance(
            scheduler,
            samples,
            nodes,
            now,
            window_size=WINDOW_SIZE,
            deadline_at=deadline_at,
            remaining_steps=None if remaining is None else remaining(),
        )
        return record.decision.target_nodes

    return decide


def rules_0_1_0_decider(cooldown_s: float = 300.0, target_step_s: float = 30.0) -> Decider:
    """Release 0.1.0's rules: x2 when queue-bound, x0.5 when idle, a cooldown, bounds 1..256."""
    window = MetricsWindow(WINDOW_SIZE)
    size_of_window = 0
    last_change: float | None = None

    def decide(samples: Sequence[StepSample], nodes: int, now: float) -> int:
        nonlocal window, size_of_window, last_change
        if size_of_window != nodes:
            window, size_of_window = MetricsWindow(WINDOW_SIZE), nodes
        window = window.add(*(sample for sample in samples if sample.nodes == nodes))
        signals = window.signals()
        if signals.samples < 3:
            return nodes
        if last_change is not None and now - last_change < cooldown_s:
            return nodes
        target = nodes
        if signals.queue_fraction >= 0.2:
            target = min(MAX_NODES, int(nodes * 2.0))
        elif 0 < signals.mean_step_s <= 0.5 * target_step_s and signals.queue_fraction <= 0.05:
            target = max(MIN_NODES, int(nodes * 0.5))
        if target != nodes:
            last_change = now
        return target

    return decide


def fixed_decider() -> Decider:
    """Never resize."""
    return lambda samples, nodes, now: nodes


# -- the workload -----------------------------------------------------------------------


def make_batch_jobs(generator: random.Random, count: int) -> list[BatchJob]:
    """Batch jobs whose deadline is reachable at a size between 2 and 48 nodes."""
    jobs = []
    for _ in range(count):
        work_s = generator.uniform(60.0, 600.0)  # node-seconds of compute per step
        fit_nodes = generator.randint(2, 48)
        overhead = generator.uniform(0.05, 0.3)  # all-reduce share of a step at fit_nodes
        comm_s = overhead * (work_s / fit_nodes) / max(math.log2(fit_nodes), 1.0)
        steps = generator.randint(200, 2000)
        startup_s = generator.uniform(30.0, 300.0)
        probe = BatchJob(steps, work_s, comm_s, 1.0, 1, startup_s)
        deadline_s = startup_s + steps * probe.step_s(fit_nodes) * generator.uniform(1.15, 1.8)
        launch = max(1, min(MAX_NODES, round(fit_nodes * 2 ** generator.uniform(-2.0, 2.0))))
        jobs.append(BatchJob(steps, work_s, comm_s, deadline_s, launch, startup_s))
    return jobs


def make_stream_jobs(generator: random.Random, count: int) -> list[StreamJob]:
    """Streams of 3 to 6 steady segments of 1 to 2 hours, rates needing 1 to 64 nodes."""
    jobs = []
    for _ in range(count):
        node_rate = generator.uniform(500.0, 5000.0)  # tokens/s one node serves
        beta = generator.uniform(0.02, 0.1)
        probe = StreamJob((), node_rate, beta, 1.0, 1, 0.0)
        segments = []
        for _ in range(generator.randint(3, 6)):
            nodes_worth = 2 ** generator.uniform(0.0, 6.0)
            rate = probe.capacity(max(1, round(nodes_worth))) * generator.uniform(0.6, 0.95)
            segments.append((generator.uniform(3600.0, 7200.0), rate))
        mean_rate = statistics.fmean(rate for _, rate in segments)
        batch_tokens = mean_rate * generator.uniform(10.0, 30.0)  # a step every 10-30 s
        startup_s = generator.uniform(30.0, 180.0)
        first_need = _smallest_serving(probe, segments[0][1], MAX_NODES)
        launch = max(1, min(MAX_NODES, round(first_need * 2 ** generator.uniform(-1.0, 1.0))))
        jobs.append(StreamJob(tuple(segments), node_rate, beta, batch_tokens, launch, startup_s))
    return jobs


def scheduler_for(startup_s: float) -> ScalePolicy:
    """The sensor's defaults with the benchmark's bounds and the job's restart time."""
    return ScalePolicy(min_nodes=MIN_NODES, max_nodes=MAX_NODES, startup_s=startup_s)
