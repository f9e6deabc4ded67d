"""The fleet benchmark's grid schedulers (:mod:`benchmarks.fleet_simulator` runs their day).

Each decides, at every check, who of the running jobs gets what and which queued jobs
start: ``fcfs``, ``quota``, ``sharing`` and the ``reference`` that sees the future (the
simulator's docstring says how each decides).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeAlias

from benchmarks.policy_simulator import BatchJob
from elasticgrid_provider.core.fleet.allocator import allocate
from elasticgrid_provider.core.fleet.sharing import JobClaim

if TYPE_CHECKING:
    from benchmarks.fleet_simulator import FleetJob, Run


def _launch_deadline_nodes(job: FleetJob, now: float, capacity: int) -> int:
    """The smallest launch size of ``job`` at ``now`` that meets its deadline (0: none does,
    or a stream)."""
    work = job.work
    if not isinstance(work, BatchJob):
        return 0
    return _deadline_nodes(work, work.steps, job.arrival_s + work.deadline_s - now, capacity, 0)


def _deadline_nodes(
    job: BatchJob, steps_left: int, time_left: float, capacity: int, nodes_now: int
) -> int:
    """The smallest size that still meets the deadline: another size pays a restart (a
    launch, from 0 nodes, does not); 0 when none does."""
    for nodes in range(1, capacity + 1):
        restart = job.startup_s if nodes_now and nodes != nodes_now else 0.0
        if restart + steps_left * job.step_s(nodes) <= time_left:
            return nodes
    return 0


Starts: TypeAlias = "list[tuple[FleetJob, int]]"
Scheduler: TypeAlias = Callable[
    [float, int, "list[Run]", "dict[str, int]", "list[FleetJob]"], "Starts"
]
"""Given the time, the capacity, the running jobs, their wanted sizes and the queue (in
arrival order): resize the running jobs in place, return the jobs to start with their sizes."""


def free_nodes(capacity: int, runs: Sequence[Run]) -> int:
    return capacity - sum(run.nodes for run in runs)


def _grant_shrinks(now: float, runs: list[Run], wanted: dict[str, int]) -> None:
    for run in runs:
        if wanted.get(run.job.name, run.nodes) < run.nodes:
            run.resize(wanted[run.job.name], now)


def fcfs(now: float, capacity: int, runs: list[Run], wanted: dict[str, int],
         queue: list[FleetJob]) -> Starts:  # fmt: skip
    """First come first served at the launch size: the head waits until it fits."""
    starts: Starts = []
    free = free_nodes(capacity, runs)
    for job in queue:
        if job.launch_nodes > free:
            break
        starts.append((job, job.launch_nodes))
        free -= job.launch_nodes
    return starts


def quota(now: float, capacity: int, runs: list[Run], wanted: dict[str, int],
          queue: list[FleetJob]) -> Starts:  # fmt: skip
    """Kueue-like: priority order, preemption to ``min_nodes``, whole scale-ups or none."""
    _grant_shrinks(now, runs, wanted)
    starts: Starts = []
    free = free_nodes(capacity, runs)
    for job in sorted(queue, key=lambda job: (-job.priority, job.arrival_s, job.name)):
        if job.launch_nodes > free:
            victims = sorted(
                (run for run in runs if run.job.priority < job.priority
                 and run.nodes > run.job.min_nodes),
                key=lambda run: (run.job.priority, -run.started_s, run.job.name),
            )  # fmt: skip
            if free + sum(run.nodes - run.job.min_nodes for run in victims) >= job.launch_nodes:
                for victim in victims:
                    if free >= job.launch_nodes:
                        break
                    freed = min(victim.nodes - victim.job.min_nodes, job.launch_nodes - free)
                    victim.resize(victim.nodes - freed, now)
                    free += freed
        if job.launch_nodes <= free:
            starts.append((job, job.launch_nodes))
            free -= job.launch_nodes
    for run in sorted(runs, key=lambda run: (-run.job.priority, run.job.arrival_s, run.job.name)):
        target = wanted.get(run.job.name, run.nodes)
        if target > run.nodes and target - run.nodes <= free:
            free -= target - run.nodes
            run.resize(target, now)
    return starts


def sharing(now: float, capacity: int, runs: list[Run], wanted: dict[str, int],
            queue: list[FleetJob]) -> Starts:  # fmt: skip
    """The provider's one allocator (:func:`allocate`) over every running job's claim and
    every queued launch's: who holds what, who is shrunk for whom, who starts."""
    return _allocate(now, capacity, runs, wanted, queue, foresight=False)


def reference(now: float, capacity: int, runs: list[Run], wanted: dict[str, int],
              queue: list[FleetJob]) -> Starts:  # fmt: skip
    """The gain-based reference: the same allocator, but every claim sees the future exactly
    (a batch job's true step time and work left give the smallest size that meets its deadline,
    a stream's coming load its size) instead of what a scale policy reads from samples."""
    return _allocate(now, capacity, runs, wanted, queue, foresight=True)


def _allocate(now: float, capacity: int, runs: list[Run], wanted: dict[str, int],
              queue: list[FleetJob], *, foresight: bool) -> Starts:  # fmt: skip
    if foresight:
        wanted = {run.job.name: _oracle_size(run, now, capacity) for run in runs}
    _grant_shrinks(now, runs, wanted)
    claims = [run.claim(wanted.get(run.job.name, run.nodes), now, capacity) for run in runs]
    claims += [_launch_claim(job, now, capacity) for job in queue]
    plan = allocate(claims, free_nodes(capacity, runs), capacity=capacity)
    for run in runs:
        if plan.nodes(run.job.name) != run.nodes:
            run.resize(plan.nodes(run.job.name), now)
    return [(job, plan.nodes(job.name)) for job in queue if plan.nodes(job.name)]


def _oracle_size(run: Run, now: float, capacity: int) -> int:
    """The size a job that sees its future asks for: a batch job keeps its size while that
    meets its deadline with a 10% margin, else the smallest that does (all of the grid when
    none does); a stream the smallest size serving the busiest hour still to come (and its
    backlog), shrinking only when that is a quarter smaller."""
    work = run.job.work
    if isinstance(work, BatchJob):
        left = work.steps - run.done
        budget = 0.9 * (run.job.arrival_s + work.deadline_s - now)
        if left * work.step_s(run.nodes) <= budget:
            return run.nodes
        return _deadline_nodes(work, left, budget, capacity, run.nodes) or capacity
    offset = now - run.job.arrival_s
    backlog = max(0, bisect.bisect_right(run.arrivals, offset) - run.index)
    peak = 0
    for hour in range(int(offset // 3600), int(work.duration_s // 3600) + 1):
        start = max(offset, hour * 3600.0)
        peak = max(peak, bisect.bisect_right(run.arrivals, start + 3600.0)
                   - bisect.bisect_right(run.arrivals, start))  # fmt: skip
    rate = (peak + backlog) * work.batch_tokens / 3600.0
    size = next((n for n in range(1, capacity + 1) if work.capacity(n) >= rate), capacity)
    size = max(size, run.job.min_nodes)
    return run.nodes if size < run.nodes and size > 0.75 * run.nodes else size


def _launch_claim(job: FleetJob, now: float, capacity: int) -> JobClaim:
    """A queued job's request: at least the size its deadline needs (when one still does), and
    never less than that: a batch job started too small for its deadline would miss it; a
    batch job no size brings in by its deadline is hopeless (it still runs)."""
    need = _launch_deadline_nodes(job, now, capacity)
    wanted = max(job.launch_nodes, need)
    work = job.work
    slack: float | None = None
    deadline = need
    if isinstance(work, BatchJob):
        time_left = job.arrival_s + work.deadline_s - now
        slack = time_left - work.steps * work.step_s(need) if need else -1.0
        deadline = need or wanted
    return JobClaim(job=job.name, nodes=0, wanted=wanted, min_nodes=max(job.min_nodes, need),
                    priority=job.priority, deadline_nodes=deadline, slack_s=slack,
                    since=job.arrival_s)  # fmt: skip


SCHEDULERS: dict[str, Scheduler] = {
    "fcfs": fcfs,
    "quota": quota,
    "sharing": sharing,
    "reference": reference,
}
STATIC = frozenset({"fcfs"})  # schedulers that never resize (no scale policy asked)
FORESIGHT = frozenset({"reference"})  # schedulers that size jobs from their future, not a policy
