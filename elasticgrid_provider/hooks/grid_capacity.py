"""Plans and launches on a shared grid: every step that reads or changes the grid ledger.

What happens under the grid lock is here, once; every decision is the pure core's
(:mod:`elasticgrid_provider.core.fleet`). Lock order: a caller holding the job's lock takes
the grid lock inside it, never the reverse. The rules: docs/fleet-ledger.md ("How plans and
launches use it"), docs/operators.md ("Sharing the grid with other jobs").
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from elasticgrid_provider.core.errors import ElasticGridError, GridCapacityError, JobLaunchError
from elasticgrid_provider.core.fleet.allocator import (
    accepting,
    allocate,
    decide_shortfall,
    plan_preemption,
)
from elasticgrid_provider.core.fleet.ledger import (
    REBUILT_PRIORITY,
    CapacityRequest,
    GridLedger,
    HoldingPhase,
    ShrinkRequest,
    confirm,
    dequeue,
    drop_reservation,
    enqueue,
    free_nodes,
    holders,
    job_usage,
    others_using,
    queue_position,
    record_round,
    release,
    renew,
    request_shrinks,
    reserve,
    used_nodes,
)
from elasticgrid_provider.core.fleet.pools import check_pools, pool_records
from elasticgrid_provider.core.fleet.sharing import (
    JobClaim,
    ShortfallDecision,
    Verdict,
    free_total,
)
from elasticgrid_provider.core.launch_record import new_launch_id
from elasticgrid_provider.core.placement import Placement
from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.policy.claim import holder_claims
from elasticgrid_provider.hooks.grid_ledger import GridLedgerStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SharedPlan:
    """What :meth:`GridCapacity.plan` decided: a placement reserved, a place in the queue
    (with the shrinks it asked for), or why it failed; ``holders`` says who uses what."""

    job: str
    decision: ShortfallDecision
    holders: str
    placement: Placement | None = None
    launch_id: str = ""
    shrinks: tuple[ShrinkRequest, ...] = ()

    @property
    def reservation(self) -> dict[str, Any]:
        """The reservation as the plan pushes it to XCom: job, launch id, nodes by provider."""
        assert self.placement is not None
        nodes = self.placement.nodes_by_provider()
        return {"job": self.job, "launch_id": self.launch_id, "nodes": nodes}


def holdings_by_job(
    ledger: GridLedger, *, except_job: str | None = None
) -> dict[str, dict[str, int]]:
    """``{job: {provider: nodes}}`` of every job that uses nodes (but ``except_job``)."""
    usage = {job: job_usage(ledger, job) for job in ledger.jobs if job != except_job}
    return {job: nodes for job, nodes in usage.items() if any(nodes.values())}


def holders_text(ledger: GridLedger, *, except_job: str | None = None) -> str:
    """Who uses the grid, per provider (the ledger's :func:`holders` phrases):
    ``'a' (3 nodes) on local; 'b' (2 nodes) on aws``; ``nobody`` when no job does."""
    phrases = [
        f"{holders(ledger, provider, except_job=except_job)} on {provider}"
        for provider in ledger.providers
        if used_nodes(ledger, except_job=except_job).get(provider)
    ]
    return "; ".join(phrases) or "nobody"


def request_claim(ledger: GridLedger, request: CapacityRequest) -> JobClaim:
    """The request as the allocator reads it: the job's queue entry when it waits (the claim
    its checks wrote: deadline, slack, gain, arrival), with the request's sizes and priority,
    counting the nodes the job uses now."""
    using = sum(job_usage(ledger, request.job).values())
    queued = next((r for r in ledger.queue if r.job == request.job), None)
    base = queued.as_claim() if queued else JobClaim(job=request.job, nodes=0, wanted=1)
    return replace(
        base,
        nodes=using,
        wanted=request.nodes,
        min_nodes=min(request.min_nodes, request.nodes),
        priority=request.priority,
    )


def decide_request(
    ledger: GridLedger, request: CapacityRequest, capacities: Mapping[str, int]
) -> ShortfallDecision:
    """The request against every claim on the grid by the one allocator
    (:func:`~elasticgrid_provider.core.fleet.allocator.decide_shortfall`, the sensor's rule
    too): a job keeps the nodes it uses (a replan of a running job competes only for the
    nodes it adds; one that shrinks is always granted)."""
    return decide_shortfall(
        request_claim(ledger, request),
        free_nodes(ledger, capacities),
        mode=request.mode,
        queued=holder_claims(ledger, request.job),
        holdings=holdings_by_job(ledger, except_job=request.job),
        capacity=sum(capacities.values()) or None,
    )


def _queued(ledger: GridLedger, request: CapacityRequest, now: float) -> GridLedger:
    """``ledger`` with ``request`` in the queue, renewed at ``now``: a job's earlier entry
    keeps its place and the claim its checks wrote, with the request's sizes (one entry per
    job, every caller updating it the same way), counting the nodes its job uses now."""
    using = sum(job_usage(ledger, request.job).values())
    fresh = request.as_queued(now, using)
    earlier = next((r for r in ledger.queue if r.job == request.job), None)
    if earlier is not None:
        fresh = replace(
            earlier,
            nodes=fresh.nodes,
            min_nodes=fresh.min_nodes,
            priority=fresh.priority,
            timeout_s=fresh.timeout_s,
            current_nodes=using,
            lease_s=fresh.lease_s,
        )
    return enqueue(ledger, fresh, now=now)


def _queue_and_preempt(
    ledger: GridLedger, request: CapacityRequest, capacities: dict[str, int], now: float
) -> tuple[GridLedger, tuple[ShrinkRequest, ...]]:
    """The request queued (its place kept when it was queued already), the shrinks of other
    jobs the allocator finds worth their loss, and the round recorded when it changed
    something: the new ledger and the shrink requests standing for this job."""
    was_queued = any(r.job == request.job for r in ledger.queue)
    ledger = _queued(ledger, request, now)
    claim = accepting(request_claim(ledger, request), request.mode)
    free = free_nodes(ledger, capacities)
    holders_now = holder_claims(ledger, request.job)
    capacity = sum(capacities.values()) or None
    preemption = plan_preemption(claim, free, holders_now, capacity=capacity)
    if preemption.shrinks or not was_queued:  # a round that changes something
        audit = allocate([*holders_now, claim], free_total(free), capacity=capacity)
        ledger = record_round(
            ledger, [*holders_now, claim], audit, by=f"plan of {request.job}", now=now
        )
    if not preemption.shrinks:
        return ledger, ()
    ledger = request_shrinks(ledger, preemption, by_priority=request.priority, now=now)
    asked = {resize.job for resize in preemption.shrinks}
    return ledger, tuple(s for s in ledger.shrinks if s.job in asked)


class GridCapacity:
    """The grid ledger's steps for plans and launches (docs/fleet-ledger.md).

    :param store: the ledger of the jobs root the job runs under.
    """

    def __init__(self, store: GridLedgerStore) -> None:
        self.store = store

    def plan(
        self,
        planner: GridPlanner,
        request: CapacityRequest,
        *,
        leave_out: Mapping[str, str] | None = None,
    ) -> SharedPlan:
        """Under the grid lock: grant and reserve, queue (and ask for shrinks), or fail."""
        skipped = set(leave_out or {})
        capacities = {p.name: p.max_nodes for p in planner.providers if p.name not in skipped}
        pools = pool_records(p for p in planner.providers if p.name not in skipped)
        with self.store.transaction() as current:
            ledger, now = current.ledger, current.now
            check_pools(ledger.pools or {}, others_using(ledger, request.job), request.job, pools)
            decision = decide_request(ledger, request, capacities)
            holders = holders_text(ledger, except_job=request.job)
            if decision.verdict is Verdict.FAILED:
                return SharedPlan(request.job, decision, holders)
            if decision.verdict is Verdict.GRANTED:
                placement = planner.plan(
                    min(decision.nodes, request.nodes),  # a shrink keeps no more than asked
                    leave_out=leave_out,
                    held_by_others=used_nodes(ledger, except_job=request.job),
                )
                if placement.launch_refusals:  # nodes no launch can use are never reserved
                    raise ElasticGridError(
                        f"job {request.job!r} was not planned, and nothing was reserved: "
                        f"{placement.launch_refusals[0]}"
                    )
                launch_id = new_launch_id()
                current.ledger = reserve(
                    ledger,
                    request.job,
                    placement.nodes_by_provider(),
                    launch_id=launch_id,
                    now=now,
                    capacities={**(ledger.capacities or {}), **capacities},
                    priority=request.priority,
                    min_nodes=request.min_nodes,
                    pools=pools,
                )
                return SharedPlan(request.job, decision, holders, placement, launch_id)
            ledger, shrinks = _queue_and_preempt(ledger, request, capacities, now)
            position = queue_position(ledger, request.job) or decision.queue_position
            current.ledger = ledger
            waiting = ShortfallDecision(Verdict.WAITING, 0, queue_position=position)
            return SharedPlan(request.job, waiting, holders, shrinks=shrinks)

    def renew(self, request: CapacityRequest, *, timeout: float | None = None) -> bool:
        """Under the lock: renew the waiting request's lease; one that lapsed meanwhile (its
        trigger was down) is queued again, at the back of its priority; True when it was.
        A :class:`TimeoutError` when the grid lock stays busy ``timeout`` seconds."""
        with self.store.transaction(timeout=timeout) as current:
            ledger, now = current.ledger, current.now
            if any(queued.job == request.job for queued in ledger.queue):
                current.ledger = renew(ledger, request.job, now=now)
                return False
            current.ledger = _queued(ledger, request, now)
            return True

    def would_grant(self, request: CapacityRequest, capacities: Mapping[str, int]) -> bool:
        """Whether the request would be granted now, read without the lock (a trigger's poll)."""
        ledger = self.store.snapshot().ledger
        return decide_request(ledger, request, capacities).verdict is Verdict.GRANTED

    def held_by_others(self, job: str | None = None) -> dict[str, int]:
        """Nodes every job but ``job`` uses, per provider, read without the lock ({} with no
        ledger): what a plan that reserves nothing places around."""
        if not self.store.path.exists():
            return {}
        return used_nodes(self.store.snapshot().ledger, except_job=job)

    def holders(self, job: str) -> str:
        """Who uses the grid now but ``job`` (read without the lock), for a failure's sentence."""
        return holders_text(self.store.snapshot().ledger, except_job=job)

    def dequeue(self, job: str, *, timeout: float | None = None) -> None:
        """Take ``job``'s request out of the queue (a timeout, a kill): it no longer waits; a
        :class:`TimeoutError` when the grid lock stays busy ``timeout`` seconds."""
        with self.store.transaction(timeout=timeout) as current:
            current.ledger = dequeue(current.ledger, job, now=current.now)

    def reserve_launch(self, job: str, placement: Placement, launch_id: str) -> None:
        """Reserve ``placement`` for launch ``launch_id``: the job's priority and ``min_nodes``
        from its plan's reservation (default 0 and the placement's size); raise
        :class:`GridCapacityError` naming the holders when it does not fit (nothing changed)."""
        shares = placement.nodes_by_provider()
        capacities = {a.provider.name: a.provider.max_nodes for a in placement.assignments}
        try:
            self._reserve_launch(job, placement, launch_id, shares, capacities)
        except OSError as exc:  # a full disk: the ledger is as it was
            raise JobLaunchError(
                f"job {job!r} was not launched: writing the grid ledger {self.store.path} failed "
                f"({exc.strerror or exc}); nothing was stopped or started"
            ) from None

    def _reserve_launch(
        self,
        job: str,
        placement: Placement,
        launch_id: str,
        shares: Mapping[str, int],
        capacities: Mapping[str, int],
    ) -> None:
        with self.store.transaction() as current:
            ledger = current.ledger
            mine = ledger.holdings_of(job)
            newest = max(mine, key=lambda holding: holding.launch_id) if mine else None
            priority = newest.priority if newest else REBUILT_PRIORITY
            min_nodes = newest.min_nodes if newest else placement.total_nodes
            try:
                current.ledger = reserve(
                    ledger,
                    job,
                    shares,
                    launch_id=launch_id,
                    now=current.now,
                    capacities={**(ledger.capacities or {}), **capacities},
                    priority=priority,
                    min_nodes=min(min_nodes, placement.total_nodes),
                    pools=pool_records(share.provider for share in placement.assignments),
                )
            except GridCapacityError as exc:
                raise GridCapacityError(
                    f"job {job!r} was not launched and nothing was stopped: {exc}"
                ) from None

    def drop_reservation(self, job: str, launch_id: str) -> dict[str, int]:
        """Forget the reservation of a launch that stopped and started nothing; the nodes it
        reserved, by provider ({} when there was none: confirmed, replaced or lapsed)."""
        with self.store.transaction() as current:
            dropped: dict[str, int] = {}
            for holding in current.ledger.holdings_of(job):
                if holding.launch_id == launch_id and holding.phase == HoldingPhase.RESERVED:
                    dropped[holding.provider] = dropped.get(holding.provider, 0) + holding.nodes
            current.ledger = drop_reservation(current.ledger, job, launch_id, now=current.now)
            return dropped

    def confirm(self, job: str, launch_id: str) -> None:
        """The launch is confirmed: its reservation becomes held (a reconciled-away one is
        logged: the launch record holds the nodes all the same)."""
        with self.store.transaction() as current:
            try:
                current.ledger = confirm(current.ledger, job, launch_id, now=current.now)
            except ElasticGridError as exc:
                log.warning("%s; the launch record holds its nodes.", exc)

    def release(self, job: str, launch_id: str | None = None) -> dict[str, int]:
        """``job`` holds, reserves and waits for nothing (it ended, or was stopped); with
        ``launch_id``, reconcile never gives that launch its nodes back. Returns the nodes it
        held or reserved, by provider."""
        with self.store.transaction() as current:
            held = {name: nodes for name, nodes in job_usage(current.ledger, job).items() if nodes}
            current.ledger = release(current.ledger, job, now=current.now, launch_id=launch_id)
            return held

    def give_back(self, job: str, launch_id: str | None, log: Any) -> dict[str, int]:
        """:meth:`release`, for a job that ended or was stopped: a ledger that cannot be written
        is logged, never in the way of a stop (the next transaction's reconcile drops a job whose
        launch ended); returns what it held ({} when that is unknown)."""
        try:
            return self.release(job, launch_id)
        except (OSError, TimeoutError, ValueError) as exc:
            log.warning("Job %s's nodes stay in the grid ledger for now: %s", job, exc)
            return {}
