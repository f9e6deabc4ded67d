"""The one allocator: who holds how many nodes of a grid, who queues, and why.

Every decision that hands out a shared grid's nodes calls :func:`allocate`: the scale check's
room for a scale-up (:func:`~elasticgrid_provider.core.policy.claim.room_for`), a plan's or a
waiting launch's request (:func:`decide_shortfall`), and the choice of whom to shrink for it
(:func:`plan_preemption`). A decision the sensor makes is one the plan honours, because both
are this function of the same claims. :func:`order_key` is the only place jobs are ordered;
the rules (the order, hopeless jobs, needs then wishes, preemption that counts both sides):
docs/fleet.md ("The allocator"). Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from elasticgrid_provider.core.fleet.sharing import (
    JobClaim,
    PreemptionPlan,
    Resize,
    ShortfallDecision,
    ShortfallMode,
    Verdict,
    free_total,
    shortfall_sentence,
)

BACKFILL_SHARE = 1 / 16
"""Behind a waiting launch, a need of at most this share of the grid may take its spare nodes
(docs/fleet.md, "The allocator"): small jobs start instead of queueing for hours, while the
floors of the jobs that start (their ``min_nodes``, which no preemption goes below) stay small
for a higher priority that comes later. Chosen from ``make bench-fleet`` (from 1/32 to 1/12
meet its target on every seed)."""
AT_RISK, LAUNCH, GROWTH = 0, 1, 2  # the tiers within a priority (docs/fleet.md, "The allocator")
TIER_WORDS = {AT_RISK: "deadline at risk", LAUNCH: "queued launch", GROWTH: "growth"}


@dataclass(frozen=True)
class JobResult:
    """One job's outcome in a round: its size before and after, its place and the reason."""

    job: str
    from_nodes: int
    to_nodes: int
    wanted: int
    position: int = 0  # 1-based place among the jobs that queue (0: it does not queue)
    reason: str = ""
    hopeless: bool = False
    preempted_by: str = ""

    @property
    def queued(self) -> bool:
        """Whether it got less than it wants (it waits in the queue for the rest)."""
        return self.position > 0


@dataclass(frozen=True)
class Allocation:
    """A round's result: the order, each job's result, and the free nodes left."""

    order: tuple[str, ...]
    results: dict[str, JobResult]
    free_left: int
    tiers: dict[str, str] = field(default_factory=dict)

    def nodes(self, job: str) -> int:
        """What ``job`` holds after the round."""
        return self.results[job].to_nodes

    @property
    def shrinks(self) -> tuple[Resize, ...]:
        """The jobs shrunk for another, in order."""
        return tuple(
            Resize(r.job, r.from_nodes, r.to_nodes, r.preempted_by)
            for job in self.order
            if (r := self.results[job]).preempted_by
        )

    @property
    def queue(self) -> tuple[str, ...]:
        """The jobs that queue, by position."""
        queued = [r for r in self.results.values() if r.queued]
        return tuple(r.job for r in sorted(queued, key=lambda r: r.position))

    def changes(self) -> dict[str, int]:
        """``{job: to_nodes}`` of the jobs whose size the round changes."""
        return {j: r.to_nodes for j, r in self.results.items() if r.to_nodes != r.from_nodes}


def is_hopeless(claim: JobClaim, capacity: int | None = None) -> bool:
    """No size it could get meets its deadline (docs/fleet.md, "The allocator")."""
    if not claim.deadline_nodes:
        return False
    if claim.slack_s is not None and claim.slack_s < 0:
        return True
    return capacity is not None and claim.deadline_nodes > capacity


def effective(claim: JobClaim, capacity: int | None) -> JobClaim:
    """The claim as it competes: a hopeless one without its deadline."""
    return replace(claim, deadline_nodes=0) if is_hopeless(claim, capacity) else claim


def tier(claim: JobClaim) -> int:
    """The claim's tier within its priority (of an :func:`effective` claim)."""
    if claim.deadline_nodes > claim.nodes:
        return AT_RISK
    return LAUNCH if claim.nodes == 0 else GROWTH


def order_key(
    claim: JobClaim, capacity: int | None = None
) -> tuple[int, int, float, bool, float, str]:
    """The one order of jobs on a grid (docs/fleet.md, "The allocator")."""
    claim = effective(claim, capacity)
    rank = tier(claim)
    if rank == AT_RISK:
        metric = (claim.slack_s or 0.0) / (claim.deadline_nodes - claim.nodes)
    elif rank == GROWTH and claim.extra_wanted:
        metric = -claim.net_gain(claim.extra_wanted) / claim.extra_wanted
    else:
        metric = 0.0
    return (-claim.priority, rank, metric, claim.nodes > 0, claim.since, claim.job)


def ordered(claims: Iterable[JobClaim], capacity: int | None = None) -> list[JobClaim]:
    """``claims`` in the allocator's order."""
    return sorted(claims, key=lambda claim: order_key(claim, capacity))


def _need(claim: JobClaim) -> int:
    """The size it must reach to be served, within what it wants (docs/fleet.md, "The
    allocator")."""
    if claim.nodes == 0:
        accepts = claim.accepts or claim.min_nodes
        return min(max(accepts, claim.deadline_nodes, 1), claim.wanted)
    return min(max(claim.deadline_nodes, claim.nodes), max(claim.wanted, claim.nodes))


def _floor(victim: JobClaim, saves_deadline: bool) -> int:
    """The smallest size ``victim`` may be shrunk to for a claimant."""
    floor = victim.min_nodes
    meets = victim.deadline_nodes and victim.nodes >= victim.deadline_nodes
    if meets and not saves_deadline:
        floor = max(floor, victim.deadline_nodes)  # never push it into missing its deadline
    return floor


def _loss_per_node(claim: JobClaim, nodes: int) -> float:
    """The work ``nodes`` fewer nodes would not do, plus the shrink's restart, per node."""
    lost = nodes * claim.gain_per_node * claim.remaining_s + claim.restart_s * claim.nodes
    return lost / max(nodes, 1)


def _victims(
    claimant: JobClaim, sizes: Mapping[str, int], claims: Sequence[JobClaim]
) -> list[tuple[JobClaim, int]]:
    """The jobs that may shrink for ``claimant`` (their size in this round, their floor):
    those a shrink leaves on time before those it would push into missing their deadline,
    then lowest priority, then least loss per node (the work lost plus the restart)."""
    saves = tier(claimant) == AT_RISK
    found = []
    for victim in claims:  # as the round found them: whether each meets its deadline
        floor = _floor(victim, saves)
        now = replace(victim, nodes=sizes[victim.job])
        shrinkable = victim.elastic and now.nodes > floor
        if shrinkable and victim.job != claimant.job and victim.priority < claimant.priority:
            found.append((now, floor))

    def cost(item: tuple[JobClaim, int]) -> tuple[bool, int, float, str]:
        victim, floor = item
        harmed = bool(victim.deadline_nodes) and floor < victim.deadline_nodes <= victim.nodes
        return (harmed, victim.priority, _loss_per_node(victim, victim.nodes - floor), victim.job)

    return sorted(found, key=cost)


def allocate(
    claims: Iterable[JobClaim],
    free: int,
    *,
    capacity: int | None = None,
    preempt: bool = True,
) -> Allocation:
    """Hand ``free`` nodes (and, with ``preempt``, lower priorities' nodes) to ``claims``
    (docs/fleet.md, "The allocator"); ``capacity`` is the grid's size, for the hopeless test."""
    if free < 0:
        raise ValueError(f"free nodes {free} must be 0 or more")
    raw = {claim.job: claim for claim in claims}
    runs = ordered(raw.values(), capacity)
    claims_now = [effective(claim, capacity) for claim in runs]
    sizes = {claim.job: claim.nodes for claim in claims_now}
    reasons: dict[str, str] = {}
    shrunk_by: dict[str, str] = {}
    waiting: set[str] = set()
    held: int | None = None  # the free nodes held for the first launch that waits
    for claim in claims_now:  # pass 1: needs
        need = _need(claim)
        short = need - sizes[claim.job]
        if short <= 0 or claim.extra_wanted == 0:
            continue
        usable = free if held is None or _backfills(short, capacity) else 0
        if short <= usable:
            sizes[claim.job], free = need, free - short
            continue
        victims = _victims(claim, sizes, claims_now) if preempt else []
        if victims and sum(v.nodes - floor for v, floor in victims) + usable >= short:
            left = short - usable
            for victim, floor in victims:
                taken = min(victim.nodes - floor, left)
                if taken > 0:
                    sizes[victim.job] -= taken
                    shrunk_by[victim.job] = claim.job
                    left -= taken
            sizes[claim.job], free = need, free - usable
            continue
        if claim.nodes == 0:
            waiting.add(claim.job)
            reasons[claim.job] = (
                f"needs {need} nodes and {free} {'is' if free == 1 else 'are'} free"
            )
            if held is None:  # the first launch that waits: what it will not need stays free
                held = free - _spare_when_it_fits(need, free, claims_now, sizes)
                free -= held
                reasons[claim.job] += f" ({held} held for it)" if held else ""
            if preempt:
                reasons[claim.job] += "; shrinking lower-priority jobs would not make it fit"
        else:
            reasons[claim.job] = f"behind its deadline: needs {need} nodes, {free} free"
    for claim in claims_now:  # pass 2: wishes
        job = claim.job
        extra = claim.wanted - sizes[job]
        if job in waiting or job in shrunk_by or extra <= 0 or free <= 0 or held is not None:
            continue  # behind a waiting launch, nobody grows: its spare is for small launches
        step = min(extra, free)
        grown = sizes[job] - claim.nodes + step
        repays = not claim.remaining_s or claim.net_gain(grown) > 0  # 0: no measure yet
        if claim.nodes and tier(claim) != AT_RISK and not repays:
            reasons.setdefault(job, f"growing by {step} would not repay its restart")
            continue
        sizes[job], free = sizes[job] + step, free - step
    results: dict[str, JobResult] = {}
    position = 0
    for claim, original in zip(claims_now, runs, strict=True):
        job = claim.job
        queues = sizes[job] < claim.wanted and job not in shrunk_by
        if queues:
            position += 1
            reasons.setdefault(job, f"wants {claim.wanted} nodes and none is free")
        results[job] = JobResult(
            job,
            claim.nodes,
            sizes[job],
            claim.wanted,
            position if queues else 0,
            reasons.get(job, f"shrunk for {shrunk_by[job]}" if job in shrunk_by else ""),
            is_hopeless(original, capacity),
            shrunk_by.get(job, ""),
        )
    tiers = {c.job: TIER_WORDS[tier(c)] for c in claims_now}
    return Allocation(tuple(c.job for c in claims_now), results, free + (held or 0), tiers)


def _backfills(short: int, capacity: int | None) -> bool:
    """Whether a need of ``short`` more nodes is small enough to take a waiting launch's spare
    nodes (:data:`BACKFILL_SHARE`; never on a grid of unknown size)."""
    return capacity is not None and short <= capacity * BACKFILL_SHARE


def _spare_when_it_fits(
    need: int, free: int, claims: Sequence[JobClaim], sizes: Mapping[str, int]
) -> int:
    """Of the ``free`` nodes, how many a launch that needs ``need`` will not use when it
    starts: the running jobs end by their ``ends_in_s`` (a job whose end is not known never
    does), and it starts once the first of them to end have freed enough; the nodes free then
    beyond its need may go to others now without delaying it (0 when no known end frees
    enough)."""
    ending = sorted(
        (c.ends_in_s, sizes[c.job]) for c in claims if c.nodes and c.ends_in_s is not None
    )
    freed = free
    for _, nodes in ending:
        freed += nodes
        if freed >= need:
            return min(free, freed - need)
    return 0


# -- what the callers ask -------------------------------------------------------------------


def accepting(claim: JobClaim, mode: ShortfallMode) -> JobClaim:
    """``claim`` with the size its shortfall ``mode`` accepts (a waiting launch: all of it)."""
    if ShortfallMode(mode) is ShortfallMode.TAKE_WHAT_FITS:
        return replace(claim, accepts=claim.min_nodes)
    return replace(claim, accepts=max(claim.wanted, claim.min_nodes))


def decide_shortfall(
    request: JobClaim,
    free: Mapping[str, int],
    *,
    mode: ShortfallMode = ShortfallMode.WAIT,
    queued: Sequence[JobClaim] = (),
    holdings: Mapping[str, Mapping[str, int]] | None = None,
    capacity: int | None = None,
) -> ShortfallDecision:
    """The request against the free nodes and the queued claims, by :func:`allocate` (no
    preemption here: :func:`plan_preemption` asks for shrinks): granted, waiting with its
    queue position, taking what fits, or failed by ``mode``."""
    mode = ShortfallMode(mode)
    wanted = replace(request, accepts=max(request.wanted, request.min_nodes))
    others = [c for c in queued if c.job != request.job]
    plan = allocate([*others, wanted], free_total(free), capacity=capacity, preempt=False)
    got = plan.results[request.job]
    if got.to_nodes >= request.wanted or request.extra_wanted == 0:
        return ShortfallDecision(Verdict.GRANTED, max(request.wanted, request.nodes))
    fits = allocate([*others, accepting(request, mode)], free_total(free), capacity=capacity,
                    preempt=False).results[request.job]  # fmt: skip
    if mode is ShortfallMode.TAKE_WHAT_FITS and fits.to_nodes >= max(request.min_nodes, 1):
        return ShortfallDecision(Verdict.GRANTED, fits.to_nodes)
    if mode is ShortfallMode.FAIL:  # the room: what it would get taking anything
        anything = replace(request, min_nodes=1, accepts=1, deadline_nodes=0)
        taken = allocate([*others, anything], free_total(free), capacity=capacity, preempt=False)
        room = taken.nodes(request.job) - request.nodes
        return ShortfallDecision(
            Verdict.FAILED, reason=shortfall_sentence(request, room, holdings or {})
        )
    return ShortfallDecision(
        Verdict.WAITING, request.nodes, queue_position=got.position, reason=got.reason
    )


def plan_preemption(
    request: JobClaim,
    free: Mapping[str, int],
    claims: Iterable[JobClaim],
    *,
    capacity: int | None = None,
) -> PreemptionPlan:
    """The shrinks :func:`allocate` makes for ``request`` (whose ``accepts`` says the size
    the result must reach), and what it gets: none when the result would not fit it."""
    holders = [replace(c, wanted=c.nodes) for c in claims if c.job != request.job]
    plan = allocate([*holders, request], free_total(free), capacity=capacity)
    got = plan.results[request.job]
    shrinks = tuple(s for s in plan.shrinks if s.preempted_by == request.job)
    if got.to_nodes <= request.nodes and not shrinks:
        return PreemptionPlan(request.job)
    freed = sum(s.from_nodes - s.to_nodes for s in shrinks)
    return PreemptionPlan(request.job, shrinks, freed, got.to_nodes)
