"""The rules for sharing one grid among many jobs: shortfalls, preemption, sharing by gain.

Pure functions of plain inputs: the free nodes per provider (``{provider: nodes}``),
and one :class:`JobClaim` per job (its priority, the nodes it holds, its
``min_nodes``, the size it wants, and what a node is worth to it). They decide;
the caller records and acts (a launch, a resize with its ``preempted_by``).

**A request that does not fit** (:func:`decide_shortfall`). A request is
granted its wanted size when that fits the free nodes left after the queued
requests ahead of it (of a higher priority, or of the same priority and queued
earlier) have their ``min_nodes``. Otherwise its :class:`ShortfallMode` decides:

* ``wait`` (the default): it waits, with its queue position (1 = next). Waiting
  is the default because it never over-subscribes, never starts a job smaller
  than its author asked for, and never fails a DAG for a busy grid.
* ``take_what_fits``: it gets what is free, when that is at least its
  ``min_nodes``; otherwise it waits as above.
* ``fail``: one sentence naming the jobs that hold the capacity, largest first.

**Preemption** (:func:`plan_preemption`). A request that does not fit may shrink
other jobs, only those of a strictly lower priority, only elastic ones, and
never below their ``min_nodes``; jobs of equal priority are never shrunk for
each other. Victims are taken lowest priority first, then those a shrink
leaves on time before those it would put behind their own deadline (their
``deadline_nodes`` above their ``min_nodes``), then least gain lost per node
freed (the work the nodes would have done, plus the restart the shrink costs),
then by name. Nothing is shrunk unless the request then gets at least
its ``min_nodes``, and others are shrunk only for what it needs (up to its
``min_nodes``), not for all it wants: it gets the rest from free nodes, now or
as they free up.

**Sharing by gain** (:func:`share_free_nodes`). When capacity frees up, or
several jobs want more than is free, nodes are handed out one step at a time.
A claim holding 0 nodes is a queued launch. Its first step is its need: its
``min_nodes``, or its ``deadline_nodes`` when larger (a job started below the
size its deadline needs would miss it). A running job's first step is the
smallest useful one: at least up to its ``min_nodes``, the gap to its
``deadline_nodes`` (or what of it fits) when it is behind its deadline, and
never a step that gains less than its restart price; a job that already got a
step takes further nodes one by one (the resize is paid once). Steps are
served needs before wishes:

1. steps that remove deadline risk (close part of a gap to ``deadline_nodes``),
   of launches and running jobs alike;
2. launches without a deadline, to their ``min_nodes``;
3. steps that only add throughput.

Within each, by priority, then queued launches before running jobs, then by
deadline risk removed (the share of the gap the step closes), then by
throughput gained net of the restart price per node, then by name. When the
next step in this order is a launch whose need does not fit, the hand-out stops:
the free nodes are held for it, and no job after it in the order grows into
them (a launch otherwise waits behind running jobs that keep growing).

What a node is worth: a job at ``n`` nodes that grows by ``k`` gains
``k * gain_per_node * remaining_s`` useful node-seconds (``gain_per_node`` is the
marginal efficiency measured from the job's throughput at its sizes,
:func:`gain_per_node`: 1.0 for linear scaling, less when sub-linear) and pays a
restart of ``restart_s`` at the larger size, ``restart_s * (n + k)`` node-seconds.
A step's net gain is the first minus the second. Nodes of one grid cost the same
to every job they may go to, so throughput per node is throughput per dollar.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from enum import IntEnum
from typing import Annotated

from pydantic import model_validator

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.validation import (
    AnyText,
    Choice,
    Count,
    Flag,
    JsonModel,
    NonNegative,
    Text,
    check_integer,
    check_number,
    choice,
    model,
    whole,
)

Priority = Annotated[int, whole(None)]  # any whole number; higher goes first


class ShortfallMode(Choice):
    """What a launch or scale-up that does not fit the free capacity does (module docstring)."""

    WAIT = "wait"
    TAKE_WHAT_FITS = "take_what_fits"
    FAIL = "fail"


DEFAULT_SHORTFALL_MODE = ShortfallMode.WAIT


class Verdict(Choice):
    """How a request against free capacity ends: granted, waiting in the queue, or failed."""

    GRANTED = "granted"
    WAITING = "waiting"
    FAILED = "failed"


@model
class JobClaim(JsonModel):
    """One job's claim on the grid: what it holds, what it wants, and what a node is worth to it."""

    job: Text
    nodes: Count
    wanted: Count
    min_nodes: Count = 1
    priority: Priority = 0
    elastic: Flag = True
    gain_per_node: NonNegative = 1.0
    remaining_s: NonNegative = 0.0
    restart_s: NonNegative = 0.0
    deadline_nodes: Count = 0
    """The size it needs to meet its deadline (0: no deadline, met at any size, or no size
    meets it any more). A stream may count its latency goal as its deadline."""

    @model_validator(mode="after")
    def _wanted_reaches_min(self) -> JobClaim:
        if self.wanted and self.wanted < self.min_nodes:
            raise ElasticGridError(
                f"job claim {self.job!r} wanted {self.wanted} is below its min_nodes "
                f"{self.min_nodes}"
            )
        return self

    @property
    def extra_wanted(self) -> int:
        """Nodes it wants on top of those it holds."""
        return max(0, self.wanted - self.nodes)

    @property
    def extra_needed(self) -> int:
        """Nodes it must get on top of those it holds to run at all (up to ``min_nodes``)."""
        return max(0, self.min_nodes - self.nodes) if self.wanted else 0

    def net_gain(self, step: int, start: int | None = None) -> float:
        """Useful node-seconds ``step`` more nodes add, minus the restart at the larger size
        (a first launch, from 0 nodes, pays no restart)."""
        held = self.nodes if start is None else start
        restart = self.restart_s * (held + step) if self.nodes else 0.0
        return step * self.gain_per_node * self.remaining_s - restart


@model
class ShortfallDecision(JsonModel):
    """What one request gets: nodes granted, a place in the queue, or why it failed."""

    verdict: Annotated[Verdict, choice(Verdict)]
    nodes: Count = 0
    queue_position: Count = 0
    reason: AnyText = ""


@model
class Resize(JsonModel):
    """One job's new size, decided by a sharing rule (``preempted_by`` names who shrank it)."""

    job: Text
    from_nodes: Count
    to_nodes: Count
    preempted_by: AnyText = ""


@model
class PreemptionPlan(JsonModel):
    """The shrinks that make room for a request, and the nodes it gets after them."""

    request: Text
    shrinks: tuple[Resize, ...] = ()
    nodes_freed: Count = 0
    granted: Count = 0


def free_total(free: Mapping[str, int]) -> int:
    """All free nodes of the grid; each provider's count checked (a whole number >= 0)."""
    return sum(check_integer(f"free nodes of {name!r}", count) for name, count in free.items())


def queue_ahead(request: JobClaim, queued: Sequence[JobClaim]) -> list[JobClaim]:
    """The queued requests served before ``request``: a higher priority, or the same and earlier
    (a request not in ``queued`` arrives last)."""
    jobs = [claim.job for claim in queued]
    arrival = jobs.index(request.job) if request.job in jobs else len(jobs)
    return [
        claim
        for position, claim in enumerate(queued)
        if claim.job != request.job
        and (claim.priority > request.priority
             or (claim.priority == request.priority and position < arrival))
    ]  # fmt: skip


def decide_shortfall(
    request: JobClaim,
    free: Mapping[str, int],
    *,
    mode: ShortfallMode = DEFAULT_SHORTFALL_MODE,
    queued: Sequence[JobClaim] = (),
    holdings: Mapping[str, Mapping[str, int]] | None = None,
) -> ShortfallDecision:
    """Grant ``request`` its extra nodes, or wait, take what fits or fail by ``mode``.

    ``queued`` are the waiting requests in arrival order (``request`` may be among
    them); ``holdings`` is ``{job: {provider: nodes}}``, for the failure's sentence.
    """
    mode = ShortfallMode(mode)
    ahead = queue_ahead(request, queued)
    room = max(0, free_total(free) - sum(claim.extra_needed for claim in ahead))
    wanted, needed = request.extra_wanted, request.extra_needed
    if wanted <= room:
        return ShortfallDecision(Verdict.GRANTED, request.nodes + wanted)
    if mode == ShortfallMode.TAKE_WHAT_FITS and room >= max(needed, 1):
        return ShortfallDecision(Verdict.GRANTED, request.nodes + room)
    if mode == ShortfallMode.FAIL:
        return ShortfallDecision(
            Verdict.FAILED, reason=shortfall_sentence(request, room, holdings or {})
        )
    return ShortfallDecision(Verdict.WAITING, request.nodes, queue_position=len(ahead) + 1)


def shortfall_sentence(
    request: JobClaim, room: int, holdings: Mapping[str, Mapping[str, int]]
) -> str:
    """``job 'a' wants 6 more nodes but 2 are free: 'b' holds 4 on local; ...``."""
    held = sorted(
        ((job, {p: n for p, n in by_provider.items() if n > 0}) for job, by_provider in holdings.items()
         if job != request.job),
        key=lambda item: (-sum(item[1].values()), item[0]),
    )  # fmt: skip
    holders = "; ".join(
        f"{job!r} holds " + " and ".join(f"{n} on {p}" for p, n in sorted(by_provider.items()))
        for job, by_provider in held
        if by_provider
    )
    return (
        f"job {request.job!r} wants {request.extra_wanted} more nodes but {room} "
        f"{'is' if room == 1 else 'are'} free: " + (holders or "no other job holds any")
    )


def plan_preemption(
    request: JobClaim, free: Mapping[str, int], claims: Iterable[JobClaim]
) -> PreemptionPlan:
    """Shrink strictly-lower-priority elastic jobs toward their ``min_nodes`` to fit ``request``.

    No plan (no shrinks, nothing granted) when even every allowed shrink leaves the
    request below its ``min_nodes``; others are shrunk for what it needs (up to its
    ``min_nodes``), and it is granted up to what it wants from the free nodes.
    """
    available = free_total(free)
    wanted, needed = request.extra_wanted, max(request.extra_needed, 1)
    if wanted <= available:
        return PreemptionPlan(request.job, granted=request.nodes + wanted)
    victims = sorted(
        (c for c in claims if _shrinkable(c, request)),
        key=lambda c: (
            c.priority,
            c.deadline_nodes > c.min_nodes,  # a shrink would put its own deadline at risk
            _loss_per_node(c, c.nodes - c.min_nodes),
            c.job,
        ),
    )
    if available + sum(c.nodes - c.min_nodes for c in victims) < needed:
        return PreemptionPlan(request.job)
    shortage, shrinks = needed - available, []  # shrink others for its need, not its wish
    for victim in victims:
        if shortage <= 0:
            break
        taken = min(victim.nodes - victim.min_nodes, shortage)
        shrinks.append(Resize(victim.job, victim.nodes, victim.nodes - taken, request.job))
        shortage -= taken
    freed = sum(shrink.from_nodes - shrink.to_nodes for shrink in shrinks)
    granted = request.nodes + min(wanted, available + freed)
    return PreemptionPlan(request.job, tuple(shrinks), freed, granted)


def _shrinkable(claim: JobClaim, request: JobClaim) -> bool:
    return (
        claim.job != request.job
        and claim.elastic
        and claim.priority < request.priority
        and claim.nodes > claim.min_nodes
    )


def _loss_per_node(claim: JobClaim, nodes: int) -> float:
    """The work ``nodes`` fewer nodes would not do, plus the shrink's restart, per node."""
    lost = nodes * claim.gain_per_node * claim.remaining_s + claim.restart_s * claim.nodes
    return lost / max(nodes, 1)


def share_free_nodes(free: Mapping[str, int], claims: Iterable[JobClaim]) -> tuple[Resize, ...]:
    """Hand the free nodes to the claims that want more, step by step (module rules); a claim
    at 0 nodes is a queued launch, and the nodes it needs are held for it while it waits."""
    left = free_total(free)
    ordered = sorted(claims, key=lambda claim: claim.job)
    given = {claim.job: 0 for claim in ordered}
    while left > 0:
        best: tuple[StepKey, JobClaim, int] | None = None
        for claim in ordered:
            offer = _next_step(claim, given[claim.job], left)
            if offer is not None:
                key = _step_key(claim, *offer[1:])
                if best is None or key < best[0]:
                    best = (key, claim, offer[0])
        if best is None or best[2] > left:
            break  # nothing is wanted, or the next in line is a launch that does not fit yet
        _, claim, step = best
        given[claim.job] += step
        left -= step
    return tuple(
        Resize(claim.job, claim.nodes, claim.nodes + given[claim.job])
        for claim in ordered
        if given[claim.job]
    )


StepKey = tuple[int, int, bool, float, float, str]


class StepKind(IntEnum):
    """What a step is for, in the order steps are served: needs before wishes."""

    DEADLINE = 0  # it removes deadline risk
    LAUNCH = 1  # it starts a queued job at its min_nodes
    THROUGHPUT = 2  # it only makes a running job faster


def _step_key(claim: JobClaim, risk_removed: float, net_per_node: float) -> StepKey:
    """The order of steps: their kind, then priority, queued launches before running jobs,
    deadline risk removed, net gain per node, name."""
    if risk_removed > 0:
        kind = StepKind.DEADLINE
    elif claim.nodes == 0:
        kind = StepKind.LAUNCH
    else:
        kind = StepKind.THROUGHPUT
    return (kind.value, -claim.priority, claim.nodes > 0, -risk_removed, -net_per_node, claim.job)


def _next_step(claim: JobClaim, given: int, left: int) -> tuple[int, float, float] | None:
    """The claim's next step (nodes, deadline risk removed, net gain per node), or None. A queued
    launch's first step is its whole need, even when it does not fit ``left``: it waits for it."""
    room = min(claim.extra_wanted - given, left)
    if claim.extra_wanted - given <= 0:
        return None
    size = claim.nodes + given
    gap = max(0, claim.deadline_nodes - size)
    if not claim.nodes and not given:
        step = max(claim.extra_needed, min(gap, claim.wanted), 1)
        net = claim.net_gain(step) / step
    elif given:
        step = 1
        net = claim.net_gain(given + 1) - claim.net_gain(given)  # one more node, same resize
        if net <= 0 or room <= 0:
            return None
    else:
        first = _first_step(claim, room, gap)
        if first is None:
            return None
        step, net = first, claim.net_gain(first) / first
    risk_removed = min(step, gap) / gap if gap else 0.0
    return step, risk_removed, net


def _first_step(claim: JobClaim, room: int, gap: int) -> int | None:
    """A running job's smallest useful first step: up to ``min_nodes``, the deadline gap (or what
    of it fits), and worth its restart; None when no step within ``room`` is."""
    least = max(claim.extra_needed, min(gap, room), 1)
    if least > room:
        return None
    if claim.net_gain(least) > 0:
        return least
    per_node = claim.gain_per_node * claim.remaining_s - claim.restart_s
    if per_node <= 0:
        return None  # no step repays its restart
    step = int(claim.restart_s * claim.nodes // per_node) + 1  # net_gain(step) > 0 from here
    return step if step <= room else None


def gain_per_node(throughput: Mapping[int, float], nodes: int, to_nodes: int) -> float:
    """Marginal efficiency of growing from ``nodes`` to ``to_nodes``, from measured throughput
    by size: the throughput each added node brings over what one node brings at ``nodes``
    (1.0 for linear scaling). Sizes between measured ones are interpolated; beyond the largest,
    the last measured slope goes on (no measurement: 1.0)."""
    if nodes < 1 or to_nodes <= nodes:
        raise ElasticGridError(f"to_nodes {to_nodes} must be above nodes {nodes} (at least 1)")
    per_node = _rate_at(throughput, nodes) / nodes
    if per_node <= 0:
        return 1.0
    gained = (_rate_at(throughput, to_nodes) - _rate_at(throughput, nodes)) / (to_nodes - nodes)
    return max(0.0, gained / per_node)


def _rate_at(throughput: Mapping[int, float], size: int) -> float:
    """Throughput at ``size``: interpolated between measured sizes, proportional below the
    smallest, the last slope beyond the largest."""
    points = sorted(
        (check_integer("throughput size", n, minimum=1), check_number(f"throughput at {n}", r))
        for n, r in throughput.items()
    )
    if len(points) < 2:
        scale = points[0][1] / points[0][0] if points else 1.0
        return scale * size
    if size <= points[0][0]:
        return points[0][1] * size / points[0][0]
    index = min(bisect.bisect_left([n for n, _ in points], size), len(points) - 1)
    (low, low_rate), (high, high_rate) = points[index - 1], points[index]
    return low_rate + (high_rate - low_rate) * (size - low) / (high - low)
