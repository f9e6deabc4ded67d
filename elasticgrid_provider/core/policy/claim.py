"""A job's claim on a shared grid, read from the grid ledger and its own scale decision.

The scale check (:mod:`elasticgrid_provider.core.check`) turns the ledger into the
:class:`~elasticgrid_provider.core.policy.grid.GridShare` the policy decides with
(:func:`grid_share`), and a decision that wants more than fits into the ledger's entries
(:func:`claim_the_grid`): the job's claim (:func:`job_request`: size, gain per node, work left,
restart price, deadline need or stream demand), its room by the one allocator over every claim
on the grid (:func:`room_for`, :func:`holder_claims`: the plan's rule too), and the shrinks it
asks of lower priorities when its deadline or demand is at risk. A claim stays queued until its
relaunch reserves the nodes or a check wants no more; each check renews its lease. The rules:
docs/fleet.md ("How the sensor shares"). Pure: no Airflow, no I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from elasticgrid_provider.core.fleet.allocator import Allocation, allocate, plan_preemption
from elasticgrid_provider.core.fleet.ledger import (
    DEFAULT_LEASE_S,
    GridLedger,
    QueuedRequest,
    dequeue,
    enqueue,
    free_nodes,
    job_usage,
    note_standing,
    queue_position,
    record_round,
    request_shrinks,
    shrink_request_for,
)
from elasticgrid_provider.core.fleet.sharing import JobClaim, free_total, gain_per_node
from elasticgrid_provider.core.policy.decision import ScaleDecision
from elasticgrid_provider.core.policy.grid import GridShare
from elasticgrid_provider.core.policy.memory import CapacityMemory
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.policy.rules import DecisionRule, ScaleAction

LogLines = list[tuple[int, str]]


@dataclass(frozen=True)
class SharedGrid:
    """The grid ledger as a check reads it, with the job's standing on it."""

    ledger: GridLedger
    capacities: dict[str, int]  # nodes per provider of the grid the job plans on
    priority: int = 0
    lease_s: float = DEFAULT_LEASE_S  # a claim no check renews for this long lapses


def grid_share(ledger: GridLedger, job: str) -> GridShare | None:
    """What the ledger says to ``job``'s decision, with no limit yet: who holds what and a
    shrink request for the job; None when no other job uses or waits for the grid and nobody
    asked the job to shrink (the policy then decides as for a job alone on its grid)."""
    shrink = shrink_request_for(ledger, job)
    others = [name for name in ledger.jobs if name != job]
    if not others and shrink is None:
        return None
    holders = {name: usage for name in others if (usage := job_usage(ledger, name))}
    return GridShare(job=job, holders=holders, shrink=shrink)


def job_request(
    job: str,
    decision: ScaleDecision,
    memory: CapacityMemory,
    policy: ScalePolicy,
    *,
    priority: int,
    now: float,
    lease_s: float = DEFAULT_LEASE_S,
) -> QueuedRequest:
    """The claim of ``decision`` made with no limit, as the queue keeps it; a decision that is
    no scale-up gives the job's standing (it wants what it has). docs/fleet.md, "How the
    sensor shares"."""
    current, wanted = decision.current_nodes, max(decision.target_nodes, 1)
    gain = gain_per_node(memory.throughput(), current, wanted) if 1 <= current < wanted else 1.0
    projection = decision.projection or {}
    finish = projection.get("current_finish_s")  # its work left at its size (None: unknown)
    remaining = finish or projection.get("horizon_s")
    remaining_s = float(remaining) if remaining else policy.horizon_s
    if decision.time_left_s is not None:
        remaining_s = min(remaining_s, max(decision.time_left_s, 0.0))
    deadline_nodes, slack_s = deadline_need(decision, policy)
    return QueuedRequest(
        job=job,
        nodes=wanted,
        min_nodes=min(current, wanted),
        since=now,
        priority=priority,
        current_nodes=current,
        gain_per_node=gain,
        remaining_s=remaining_s,
        restart_s=policy.startup_s,
        ends_in_s=None if finish is None else float(finish),
        deadline_nodes=deadline_nodes,
        slack_s=slack_s,
        lease_s=lease_s,
    )


def deadline_need(decision: ScaleDecision, policy: ScalePolicy) -> tuple[int, float | None]:
    """The size ``decision`` says the job's deadline needs, and the seconds it has to spare
    there (below 0: no size meets it, the allocator marks it hopeless); a stream's scale-up
    for its demand needs its target (its demand is its need); (0, None) without either.
    A job on track needs the size it has (the deadline rule shrinks it when less will do)."""
    if decision.rule is DecisionRule.DEMAND and decision.target_nodes > decision.current_nodes:
        return decision.target_nodes, None
    if decision.time_left_s is None:
        return 0, None
    projection = decision.projection or {}
    moves = decision.rule in (DecisionRule.DEADLINE_PRESSURE, DecisionRule.DEADLINE_SLACK)
    size = decision.target_nodes if moves else decision.current_nodes
    finish = projection.get("target_finish_s" if moves else "current_finish_s")
    if finish is None:
        return size, None
    restart = policy.startup_s if size != decision.current_nodes else 0.0
    return size, decision.time_left_s - float(finish) - restart


def holder_claims(ledger: GridLedger, except_job: str | None = None) -> list[JobClaim]:
    """Every job on the grid but ``except_job`` as the allocator sees it: a queued one by its
    queue entry (counting the nodes it uses now), a running one by its standing (wanting what
    it uses); a running job's ``min_nodes`` as it reserved (a ``min_nodes`` never recorded
    counts as its size, so it is never shrunk), its priority as it queued, else reserved."""
    claims = []
    for job in ledger.jobs:
        used = sum(job_usage(ledger, job).values())
        queued = next((request for request in ledger.queue if request.job == job), None)
        known = queued or next((claim for claim in ledger.standing if claim.job == job), None)
        if job == except_job or not (used or queued):
            continue
        claim = known.as_claim() if known else JobClaim(job=job, nodes=used, wanted=used)
        if used:
            newest = max(ledger.holdings_of(job), key=lambda holding: holding.launch_id)
            wants = claim.wanted if queued is not None and claim.wanted > used else used
            floor = min(newest.min_nodes or used, used)
            priority = claim.priority if queued is not None else newest.priority
            claim = replace(claim, nodes=used, wanted=wants, min_nodes=floor, priority=priority)
        claims.append(claim)
    return claims


def allocation_for(
    ledger: GridLedger, request: QueuedRequest, capacities: Mapping[str, int]
) -> tuple[list[JobClaim], Allocation]:
    """Every claim on the grid with ``request``'s, and :func:`allocate`'s round over them
    without preemption (the free nodes of ``capacities``)."""
    base = max(request.current_nodes, sum(job_usage(ledger, request.job).values()))
    free = free_total(free_nodes(ledger, capacities))
    mine = replace(request.as_claim(), nodes=base)
    claims = [*holder_claims(ledger, request.job), mine]
    plan = allocate(claims, free, capacity=sum(capacities.values()) or None, preempt=False)
    return claims, plan


def room_for(ledger: GridLedger, request: QueuedRequest, capacities: Mapping[str, int]) -> int:
    """The most nodes ``request``'s job may have now: its size after :func:`allocate` over
    every claim on the grid, without preemption (docs/fleet.md, "How the sensor shares")."""
    base = max(request.current_nodes, sum(job_usage(ledger, request.job).values()))
    return max(base, allocation_for(ledger, request, capacities)[1].nodes(request.job))


def claim_the_grid(
    job: str,
    grid: SharedGrid,
    memory: CapacityMemory,
    policy: ScalePolicy,
    decide: Callable[[GridShare | None], Any],
    now: float,
    log: LogLines,
) -> tuple[Any, GridLedger]:
    """One check on a shared grid (docs/fleet.md, "How the sensor shares"): the decision
    record ``decide`` made with the grid's share, and the ledger after it; ``log`` gets what
    changed."""
    ledger = grid.ledger
    share = grid_share(ledger, job)
    record = decide(share)
    wanted = record.decision
    request = job_request(
        job, wanted, memory, policy, priority=grid.priority, now=now, lease_s=grid.lease_s
    )
    if share is not None and wanted.action is ScaleAction.SCALE_UP:
        claims, plan = allocation_for(ledger, request, grid.capacities)
        room = max(request.current_nodes, plan.nodes(job))
        was_queued = any(r.job == job for r in ledger.queue)
        ledger = enqueue(ledger, request, now=now)
        if room < wanted.target_nodes:
            record = decide(replace(share, max_nodes=room))
            if not was_queued:  # a round that changes something: the job starts to queue
                ledger = record_round(ledger, claims, plan, by=f"check of {job}", now=now)
            log.append(
                (
                    logging.INFO,
                    f"Job {job} wants {wanted.target_nodes} nodes and the grid leaves it "
                    f"{room}: its claim waits in the grid queue at position "
                    f"{queue_position(ledger, job)} ({plan.results[job].reason}).",
                )
            )
            if request.deadline_nodes > room and not plan.results[job].hopeless:
                ledger = _ask_shrinks(grid, ledger, request, room, now, log)
        return record, ledger
    if any(request.job == job for request in ledger.queue):
        ledger = dequeue(ledger, job, now=now)
        log.append((logging.INFO, f"Job {job} no longer waits in the grid queue."))
    # noted even when the job is alone on the grid: a claim that comes later weighs the job's
    # deadline before the job's next check
    if _standing_changed(ledger, request):
        ledger = note_standing(ledger, request, now=now)
    return record, ledger


def _standing_changed(ledger: GridLedger, claim: QueuedRequest) -> bool:
    """Whether ``claim`` says more than the job's recorded standing (its deadline's size, or
    whether it can still meet it): a check that changes nothing writes nothing."""
    before = next((c for c in ledger.standing if c.job == claim.job), None)

    def key(c: QueuedRequest) -> tuple[int, int, bool, int]:
        return (c.current_nodes, c.deadline_nodes, (c.slack_s or 0.0) < 0, c.priority)

    return before is None or key(before) != key(claim)


def _ask_shrinks(
    grid: SharedGrid,
    ledger: GridLedger,
    request: QueuedRequest,
    room: int,
    now: float,
    log: LogLines,
) -> GridLedger:
    """Deadline (or a stream's demand) at risk: ask strictly-lower-priority jobs to shrink
    for the nodes the grid does not leave the job, by :func:`plan_preemption` (never a victim
    below its ``min_nodes``, nor one that meets its deadline into missing it unless this saves
    the job's, and only when the deadline size then fits)."""
    # the nodes the allocator left the job, as one count (it sums free nodes, whatever the
    # provider): the shrinks make up the rest of its need
    available = {"grid": max(0, room - request.current_nodes)}
    capacity = sum(grid.capacities.values()) or None
    plan = plan_preemption(
        request.as_claim(), available, holder_claims(ledger, request.job), capacity=capacity
    )
    if not plan.shrinks:
        return ledger
    asked = ", ".join(f"{s.job} {s.from_nodes} -> {s.to_nodes}" for s in plan.shrinks)
    log.append(
        (
            logging.INFO,
            f"Job {request.job} (priority {grid.priority}) is behind its deadline and asked "
            f"lower-priority jobs to shrink: {asked}.",
        )
    )
    return request_shrinks(ledger, plan, by_priority=grid.priority, now=now)
