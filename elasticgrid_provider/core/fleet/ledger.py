"""The grid's ledger of held capacity: which job holds how many nodes on which provider.

The one account of who holds what on a shared grid, changed only under the grid-wide
lock (:mod:`elasticgrid_provider.hooks.grid_ledger`) in *record intent -> act ->
confirm* steps: :func:`reserve` before a launch acts, confirm once it is recorded,
:func:`release` when the job ends; the queue of requests that do not fit (leases,
:func:`enqueue` keeping a job's place), shrink requests and allocation rounds. The rules:
``docs/fleet-ledger.md`` ("The ledger") and ``docs/fleet.md``; matching the ledger to
the launch records is :mod:`~elasticgrid_provider.core.fleet.reconcile`'s. Pure: no I/O,
no clock (``now`` is given, epoch seconds).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Annotated

from elasticgrid_provider.core.errors import ElasticGridError, GridCapacityError
from elasticgrid_provider.core.fleet.allocator import Allocation, order_key
from elasticgrid_provider.core.fleet.pools import PoolRecord, check_pools
from elasticgrid_provider.core.fleet.sharing import JobClaim, PreemptionPlan, ShortfallMode
from elasticgrid_provider.core.records import Extras, ForwardCompatible, RecordLayout, extras_field
from elasticgrid_provider.core.validation import (
    AboveZero,
    Choice,
    Count,
    Finite,
    JsonModel,
    NonNegative,
    Positive,
    Text,
    choice,
    model,
    whole,
)

REQUEST_LAYOUT = RecordLayout("capacity request", major=1, unversioned=1)
LEDGER_LAYOUT = RecordLayout("grid ledger", major=2, minor=2, migrated=(1,), unversioned=2)
"""2: queued requests carry their claim; shrink requests (1 reads as 2: it only lacks them).
2.1: a claim's ``slack_s``, the running jobs' ``standing`` and the audited ``rounds`` (a 2.0
ledger reads as 2.1 without them).
2.2: a claim's ``ends_in_s`` (a 2.1 ledger reads as 2.2 without it: its jobs' ends unknown)."""
REBUILT_PRIORITY = 0  # the priority of a holding rebuilt from a launch record alone
DEFAULT_LEASE_S = 600.0  # the lease of a request written before leases (no lease_s of its own)
MIN_LEASE_S = 120.0  # the shortest lease: a busy worker or triggerer may look late
LOOKS_PER_LEASE = 4  # a request lapses after this many looks at the grid went missing


def lease_for(poll_interval: float) -> float:
    """The lease of a request whose task looks at the grid every ``poll_interval`` seconds."""
    return max(LOOKS_PER_LEASE * poll_interval, MIN_LEASE_S)


Priority = Annotated[int, whole(None)]  # any whole number; higher goes first


class HoldingPhase(Choice):
    """Whether a holding is an intent or confirmed by a launch record (module docstring)."""

    RESERVED = "reserved"  # recorded before a launch or resize acts
    HELD = "held"  # confirmed by the job's launch record


@model
class Holding(ForwardCompatible, JsonModel):
    """Nodes one job holds (or reserved) on one provider for one launch."""

    WHERE = "ledger holding"

    job: Text
    provider: Text
    nodes: Positive
    phase: Annotated[HoldingPhase, choice(HoldingPhase)]
    launch_id: Text
    recorded_at: Finite
    priority: Priority = REBUILT_PRIORITY
    min_nodes: Count = 0
    extras: Extras = extras_field()


@model
class QueuedRequest(ForwardCompatible, JsonModel):
    """A job waiting for nodes: how many it wants, at least how many, since when."""

    job: Text
    nodes: Positive
    min_nodes: Count
    since: Finite
    priority: Priority = REBUILT_PRIORITY
    timeout_s: NonNegative | None = None
    current_nodes: Count = 0
    gain_per_node: NonNegative = 1.0
    remaining_s: NonNegative = 0.0
    restart_s: NonNegative = 0.0
    ends_in_s: NonNegative | None = None  # seconds to its finish at current_nodes (None: unknown)
    deadline_nodes: Count = 0
    renewed_at: Finite | None = None  # the waiting task's last look (None: since)
    lease_s: AboveZero = DEFAULT_LEASE_S
    slack_s: float | None = None  # seconds to spare at deadline_nodes (below 0: hopeless)
    extras: Extras = extras_field()

    def as_claim(self) -> JobClaim:
        """The request as the sharing rules read it (:class:`JobClaim`)."""
        return JobClaim(
            job=self.job,
            nodes=self.current_nodes,
            wanted=self.nodes,
            min_nodes=min(self.min_nodes, self.nodes),
            priority=self.priority,
            gain_per_node=self.gain_per_node,
            remaining_s=self.remaining_s,
            restart_s=self.restart_s,
            ends_in_s=self.ends_in_s,
            deadline_nodes=self.deadline_nodes,
            slack_s=self.slack_s,
            since=self.since,
        )

    def expired(self, now: float) -> bool:
        """Whether the request waited past its timeout (never, without one)."""
        return self.timeout_s is not None and now - self.since > self.timeout_s

    @property
    def last_look(self) -> float:
        """When the waiting task last renewed the request (its arrival, if never)."""
        return self.since if self.renewed_at is None else self.renewed_at

    def lapsed(self, now: float) -> bool:
        """Whether the waiting task stopped renewing the request for longer than its lease."""
        return now - self.last_look > self.lease_s


@model
class CapacityRequest(ForwardCompatible, JsonModel):
    """What a fleet-aware plan asks of the grid; a record handed to a
    :class:`~elasticgrid_provider.triggers.capacity.GridCapacityTrigger`, which may run another
    release (:mod:`~elasticgrid_provider.core.records`)."""

    LAYOUT = REQUEST_LAYOUT

    job: Text
    nodes: Positive
    min_nodes: Count
    priority: Priority = REBUILT_PRIORITY
    mode: Annotated[ShortfallMode, choice(ShortfallMode)] = ShortfallMode.WAIT
    timeout_s: NonNegative | None = None
    lease_s: AboveZero = DEFAULT_LEASE_S  # lease_for(the task's poll_interval)
    extras: Extras = extras_field()  # a newer minor's fields

    def as_queued(self, since: float, current_nodes: int = 0) -> QueuedRequest:
        """The request as it waits in the ledger's queue (``current_nodes``: what it uses)."""
        return QueuedRequest(
            job=self.job,
            nodes=self.nodes,
            min_nodes=self.min_nodes,
            since=since,
            priority=self.priority,
            timeout_s=self.timeout_s,
            current_nodes=current_nodes,
            lease_s=self.lease_s,
        )


@model
class ShrinkRequest(ForwardCompatible, JsonModel):
    """A higher-priority job asked ``job`` to shrink to ``to_nodes`` (its next check does it,
    through the job's own safe resize path, recording ``preempted_by``)."""

    job: Text
    to_nodes: Count
    by_job: Text
    by_priority: Priority
    since: Finite
    extras: Extras = extras_field()


@model
class AllocationRound(ForwardCompatible, JsonModel):
    """One allocation round that changed the grid (:mod:`.allocator`): who asked, the claims,
    the order, each job's size after it, why each queued job queues, the hopeless jobs."""

    WHERE = "ledger allocation round"

    at: Finite
    by: Text
    claims: tuple[JobClaim, ...] = ()
    order: tuple[str, ...] = ()
    tiers: dict[str, str] | None = None  # why each job stands where it does in the order
    result: dict[str, Count] | None = None
    queued: dict[str, str] | None = None
    hopeless: tuple[str, ...] = ()
    extras: Extras = extras_field()


ROUNDS_KEPT = 20  # the audit keeps the last rounds only


@model
class GridLedger(ForwardCompatible, JsonModel):
    """The grid's holdings, its queue, and the providers' capacities last recorded."""

    LAYOUT = LEDGER_LAYOUT

    holdings: tuple[Holding, ...] = ()
    queue: tuple[QueuedRequest, ...] = ()
    capacities: dict[str, Count] | None = None
    updated_at: Finite = 0.0
    shrinks: tuple[ShrinkRequest, ...] = ()
    ended: dict[str, str] | None = None
    """``{job: launch_id}`` of launches released as ended while their record reads running."""
    pools: dict[str, PoolRecord] | None = None
    """``{provider: pool}``: what each name stood for at its last reservation (:mod:`.pools`)."""
    standing: tuple[QueuedRequest, ...] = ()
    """The last claim of each running job whose check wanted no more nodes (its deadline's
    size and slack, what a node is worth to it): what preemption weighs as the victim's side."""
    rounds: tuple[AllocationRound, ...] = ()
    """The last :data:`ROUNDS_KEPT` allocation rounds that changed anything, oldest first."""
    extras: Extras = extras_field()

    def holdings_of(self, job: str) -> tuple[Holding, ...]:
        """The job's holdings, reserved and held."""
        return tuple(holding for holding in self.holdings if holding.job == job)

    @property
    def jobs(self) -> tuple[str, ...]:
        """Every job that holds, reserved or waits, sorted."""
        names = {holding.job for holding in self.holdings} | {req.job for req in self.queue}
        names |= {shrink.job for shrink in self.shrinks}
        return tuple(sorted(names))

    @property
    def providers(self) -> tuple[str, ...]:
        """Every provider with a capacity or a holding, sorted."""
        names = set(self.capacities or {}) | {holding.provider for holding in self.holdings}
        return tuple(sorted(names))


def job_usage(ledger: GridLedger, job: str) -> dict[str, int]:
    """Nodes ``job`` uses per provider: the larger of held and reserved (module docstring)."""
    held: dict[str, int] = {}
    reserved: dict[str, int] = {}
    for holding in ledger.holdings_of(job):
        into = held if holding.phase == HoldingPhase.HELD else reserved
        into[holding.provider] = into.get(holding.provider, 0) + holding.nodes
    return {p: max(held.get(p, 0), reserved.get(p, 0)) for p in sorted({*held, *reserved})}


def used_nodes(ledger: GridLedger, *, except_job: str | None = None) -> dict[str, int]:
    """Nodes used per provider by every job (but ``except_job``)."""
    used: dict[str, int] = {}
    for job in ledger.jobs:
        if job != except_job:
            for provider, nodes in job_usage(ledger, job).items():
                used[provider] = used.get(provider, 0) + nodes
    return used


def free_nodes(
    ledger: GridLedger,
    capacities: Mapping[str, int] | None = None,
    *,
    for_job: str | None = None,
) -> dict[str, int]:
    """Free nodes per provider (never below 0): its capacity (``capacities``, else the
    ledger's) less what jobs use; ``for_job`` counts its own nodes as free to it."""
    capacity = ledger.capacities or {} if capacities is None else capacities
    used = used_nodes(ledger, except_job=for_job)
    return {name: max(0, nodes - used.get(name, 0)) for name, nodes in sorted(capacity.items())}


def holders(ledger: GridLedger, provider: str, *, except_job: str | None = None) -> str:
    """Who uses ``provider``, as ``job (N nodes)`` phrases, largest first; ``nobody`` if none."""
    usage = [
        (nodes, job)
        for job in ledger.jobs
        if job != except_job and (nodes := job_usage(ledger, job).get(provider, 0))
    ]
    usage.sort(key=lambda item: (-item[0], item[1]))
    return ", ".join(f"{job!r} ({nodes} nodes)" for nodes, job in usage) or "nobody"


def others_using(ledger: GridLedger, job: str) -> dict[str, str]:
    """``{provider: who}`` for each provider other jobs than ``job`` use (:func:`holders`)."""
    used = used_nodes(ledger, except_job=job)
    return {name: holders(ledger, name, except_job=job) for name, nodes in used.items() if nodes}


def reserve(
    ledger: GridLedger,
    job: str,
    shares: Mapping[str, int],
    *,
    launch_id: str,
    now: float,
    capacities: Mapping[str, int],
    priority: int = REBUILT_PRIORITY,
    min_nodes: int = 0,
    pools: Mapping[str, PoolRecord] | None = None,
) -> GridLedger:
    """Record ``job``'s intent to run ``shares`` (provider -> nodes) as launch ``launch_id``.

    Replaces the job's earlier reservations (its held nodes stay until :func:`confirm`)
    and takes it out of the queue. Raises :class:`GridCapacityError` when a provider has
    fewer free nodes than asked, naming the provider, free, asked and the holders, or
    when ``pools`` would count a pool twice (:func:`~.pools.check_pools`); an unknown
    provider or a bad count is an :class:`ElasticGridError`.
    """
    check_pools(ledger.pools or {}, others_using(ledger, job), job, pools or {})
    free = free_nodes(ledger, capacities, for_job=job)
    entries = []
    for provider, nodes in sorted(shares.items()):
        if nodes == 0:
            continue
        if provider not in free:
            raise ElasticGridError(
                f"provider {provider!r} is not on the grid (providers: {', '.join(free)})"
            )
        entry = Holding(
            job, provider, nodes, HoldingPhase.RESERVED, launch_id, now, priority, min_nodes
        )
        if nodes > free[provider]:
            raise GridCapacityError(
                f"provider {provider!r} has {free[provider]} free nodes but job {job!r} asked "
                f"for {nodes}; held by {holders(ledger, provider, except_job=job)}"
            )
        entries.append(entry)
    kept = tuple(
        holding
        for holding in ledger.holdings
        if holding.job != job or holding.phase == HoldingPhase.HELD
    )
    return replace(
        ledger,
        holdings=kept + tuple(entries),
        queue=tuple(request for request in ledger.queue if request.job != job),
        capacities=dict(capacities),
        pools={**(ledger.pools or {}), **(pools or {})} or None,
        updated_at=now,
    )


def confirm(ledger: GridLedger, job: str, launch_id: str, *, now: float) -> GridLedger:
    """Make ``job``'s reservation of ``launch_id`` held and drop its older holdings; an
    :class:`ElasticGridError` when there is no such reservation (reconciled away)."""
    mine = [h for h in ledger.holdings_of(job) if h.launch_id == launch_id]
    if not mine:
        raise ElasticGridError(
            f"job {job!r} has no reservation for launch {launch_id!r} in the grid ledger"
        )
    held = tuple(replace(h, phase=HoldingPhase.HELD, recorded_at=now) for h in mine)
    others = tuple(h for h in ledger.holdings if h.job != job)
    return replace(ledger, holdings=others + held, updated_at=now)


def drop_reservation(ledger: GridLedger, job: str, launch_id: str, *, now: float) -> GridLedger:
    """Forget ``job``'s reservation of ``launch_id`` (its launch stopped and started nothing)."""
    kept = tuple(
        h
        for h in ledger.holdings
        if not (h.job == job and h.launch_id == launch_id and h.phase == HoldingPhase.RESERVED)
    )
    return replace(ledger, holdings=kept, updated_at=now)


def release(
    ledger: GridLedger, job: str, *, now: float, launch_id: str | None = None
) -> GridLedger:
    """``job`` holds, reserves and waits for nothing any more (it ended or was stopped);
    with ``launch_id``, that launch ended: reconcile gives it no holdings back."""
    ended = dict(ledger.ended or {})
    if launch_id is not None:
        ended[job] = launch_id
    return replace(
        ledger,
        ended=ended or None,
        holdings=tuple(h for h in ledger.holdings if h.job != job),
        queue=tuple(request for request in ledger.queue if request.job != job),
        standing=tuple(claim for claim in ledger.standing if claim.job != job),
        shrinks=tuple(s for s in ledger.shrinks if job not in (s.job, s.by_job)),
        updated_at=now,
    )


def request_shrinks(
    ledger: GridLedger, plan: PreemptionPlan, *, by_priority: int, now: float
) -> GridLedger:
    """Record the plan's shrinks for their jobs' next checks (a job's earlier request goes)."""
    asked = {resize.job for resize in plan.shrinks}
    kept = tuple(shrink for shrink in ledger.shrinks if shrink.job not in asked)
    new = tuple(
        ShrinkRequest(resize.job, resize.to_nodes, plan.request, by_priority, now)
        for resize in plan.shrinks
    )
    return replace(ledger, shrinks=kept + new, updated_at=now)


def shrink_request_for(ledger: GridLedger, job: str) -> ShrinkRequest | None:
    """The request that ``job`` shrink, or None."""
    return next((shrink for shrink in ledger.shrinks if shrink.job == job), None)


def shrink_pending(ledger: GridLedger, shrink: ShrinkRequest) -> bool:
    """A shrink stands while its job uses more than asked and its asker still waits."""
    uses = sum(job_usage(ledger, shrink.job).values())
    waits = any(request.job == shrink.by_job for request in ledger.queue)
    return uses > shrink.to_nodes and waits


def enqueue(ledger: GridLedger, request: QueuedRequest, *, now: float) -> GridLedger:
    """Put ``request`` in the queue, renewed at ``now``; a job's earlier request keeps its
    place (``since``)."""
    earlier = next((r for r in ledger.queue if r.job == request.job), None)
    since = request.since if earlier is None else earlier.since
    request = replace(request, since=since, renewed_at=now)
    others = tuple(r for r in ledger.queue if r.job != request.job)
    return replace(ledger, queue=(*others, request), updated_at=now)


def renew(ledger: GridLedger, job: str, *, now: float) -> GridLedger:
    """``job``'s request renewed at ``now`` (its task still waits); unchanged if not queued."""
    queue = tuple(replace(r, renewed_at=now) if r.job == job else r for r in ledger.queue)
    return replace(ledger, queue=queue, updated_at=now)


def lapsed_requests(ledger: GridLedger, now: float) -> tuple[QueuedRequest, ...]:
    """The queued requests whose lease lapsed at ``now`` (:meth:`QueuedRequest.lapsed`)."""
    return tuple(request for request in ledger.queue if request.lapsed(now))


def dequeue(ledger: GridLedger, job: str, *, now: float) -> GridLedger:
    """Take ``job``'s request out of the queue (it was served, gave up or timed out)."""
    return replace(ledger, queue=tuple(r for r in ledger.queue if r.job != job), updated_at=now)


def queue_order(ledger: GridLedger) -> tuple[QueuedRequest, ...]:
    """The queued requests in the order they are served: the allocator's order
    (:func:`~elasticgrid_provider.core.fleet.allocator.order_key`)."""
    capacity = sum((ledger.capacities or {}).values()) or None
    return tuple(sorted(ledger.queue, key=lambda r: order_key(r.as_claim(), capacity)))


def note_standing(ledger: GridLedger, claim: QueuedRequest, *, now: float) -> GridLedger:
    """``ledger`` with ``claim`` as its job's standing (its earlier one goes)."""
    kept = tuple(c for c in ledger.standing if c.job != claim.job)
    return replace(ledger, standing=(*kept, claim), updated_at=now)


def record_round(
    ledger: GridLedger,
    claims: Sequence[JobClaim],
    allocation: Allocation,
    *,
    by: str,
    now: float,
) -> GridLedger:
    """``ledger`` with one more audited round (:class:`AllocationRound`; the oldest beyond
    :data:`ROUNDS_KEPT` go)."""
    entry = AllocationRound(
        at=now,
        by=by,
        claims=tuple(claims),
        order=allocation.order,
        tiers=dict(allocation.tiers),
        result={job: allocation.nodes(job) for job in allocation.order},
        queued={job: allocation.results[job].reason for job in allocation.queue},
        hopeless=tuple(job for job in allocation.order if allocation.results[job].hopeless),
    )
    return replace(ledger, rounds=(*ledger.rounds, entry)[-ROUNDS_KEPT:], updated_at=now)


def queue_position(ledger: GridLedger, job: str) -> int | None:
    """``job``'s 1-based place in the queue, or None when it does not wait."""
    for place, request in enumerate(queue_order(ledger), start=1):
        if request.job == job:
            return place
    return None
