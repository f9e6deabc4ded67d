"""A job's claim on a shared grid, read from the grid ledger and its own scale decision.

The scale check (:mod:`elasticgrid_provider.core.check`) uses these to turn the ledger
into the :class:`~elasticgrid_provider.core.policy.grid.GridShare` the policy decides with,
and a decision that wants more than fits into the ledger's entries:

* :func:`grid_share`: who holds what and a shrink request for the job; None when no other
  job uses or waits for the grid and nobody asked the job to shrink (then the policy
  decides as for a job alone on its grid);
* :func:`job_request`: what a scale-up wants, as the queue keeps it: the size, the gain
  per node from the throughput the job measured at its sizes
  (:func:`~elasticgrid_provider.core.fleet.sharing.gain_per_node`), the time its work has
  left, the restart price (``startup_s``) and, under deadline pressure, the deadline's size;
* :func:`room_for`: the most nodes the job may have now: what it uses plus its share of
  the free nodes by :func:`~elasticgrid_provider.core.fleet.sharing.share_free_nodes` over
  the queued claims and its own (all the free nodes when no other job waits);
* :func:`holder_claims`: the other jobs as the preemption rule sees them (priority and
  ``min_nodes`` from their reservations; a ``min_nodes`` never recorded counts as their
  size, so they are never shrunk);
* :func:`claim_the_grid`: one check's part: decide with the grid's share; a scale-up
  queues its claim, and one beyond the room is decided again with the room (clamped, or
  held for ``capacity``); under deadline pressure, strictly-lower-priority jobs are asked
  to shrink (:func:`~elasticgrid_provider.core.fleet.sharing.plan_preemption`). A decision
  that is no scale-up takes the claim out of the queue.

A claim stays queued after a scale-up that fits, so other jobs' checks do not count the
nodes it grows into as free before its relaunch reserves them (a reservation takes the
job's claim out of the queue); the job's next check, its end or its stop (a release)
takes it out. Each check that queues it again renews its lease (``SharedGrid.lease_s``:
four of the sensor's ``poke_interval``, at least two minutes), so a claim whose sensor
stopped checking for good lapses (:mod:`~elasticgrid_provider.core.fleet.ledger`).

Pure: no Airflow, no I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from elasticgrid_provider.core.fleet.ledger import (
    DEFAULT_LEASE_S,
    GridLedger,
    QueuedRequest,
    dequeue,
    enqueue,
    free_nodes,
    job_usage,
    queue_position,
    request_shrinks,
    shrink_request_for,
)
from elasticgrid_provider.core.fleet.sharing import (
    JobClaim,
    free_total,
    gain_per_node,
    plan_preemption,
    share_free_nodes,
)
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
    """What the ledger says to ``job``'s decision, with no limit yet (module docstring)."""
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
    """The queue entry of a scale-up ``decision`` made with no limit (module docstring)."""
    current, wanted = decision.current_nodes, decision.target_nodes
    gain = gain_per_node(memory.throughput(), current, wanted) if 1 <= current < wanted else 1.0
    projection = decision.projection or {}
    remaining = projection.get("current_finish_s") or projection.get("horizon_s")
    remaining_s = float(remaining) if remaining else policy.horizon_s
    if decision.time_left_s is not None:
        remaining_s = min(remaining_s, max(decision.time_left_s, 0.0))
    pressed = decision.rule is DecisionRule.DEADLINE_PRESSURE
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
        deadline_nodes=wanted if pressed else 0,
        lease_s=lease_s,
    )


def room_for(ledger: GridLedger, request: QueuedRequest, capacities: Mapping[str, int]) -> int:
    """The most nodes ``request``'s job may have now (module docstring)."""
    base = max(request.current_nodes, sum(job_usage(ledger, request.job).values()))
    free = free_nodes(ledger, capacities)
    claims = [queued.as_claim() for queued in ledger.queue if queued.job != request.job]
    if not claims:
        return base + free_total(free)
    shares = share_free_nodes(free, [*claims, request.as_claim()])
    given = sum(share.to_nodes - share.from_nodes for share in shares if share.job == request.job)
    return base + given


def holder_claims(ledger: GridLedger, except_job: str) -> list[JobClaim]:
    """Every other job that uses nodes, as a claim for the preemption rule (module docstring)."""
    claims = []
    for job in ledger.jobs:
        used = sum(job_usage(ledger, job).values())
        if job == except_job or not used:
            continue
        newest = max(ledger.holdings_of(job), key=lambda holding: holding.launch_id)
        queued = next((request for request in ledger.queue if request.job == job), None)
        claims.append(
            JobClaim(
                job=job,
                nodes=used,
                wanted=used,
                min_nodes=min(newest.min_nodes or used, used),
                priority=newest.priority,
                gain_per_node=queued.gain_per_node if queued else 1.0,
                remaining_s=queued.remaining_s if queued else 0.0,
                restart_s=queued.restart_s if queued else 0.0,
                deadline_nodes=queued.deadline_nodes if queued else 0,
            )
        )
    return claims


def claim_the_grid(
    job: str,
    grid: SharedGrid,
    memory: CapacityMemory,
    policy: ScalePolicy,
    decide: Callable[[GridShare | None], Any],
    now: float,
    log: LogLines,
) -> tuple[Any, GridLedger]:
    """One check on a shared grid (module docstring): the decision record ``decide`` made
    with the grid's share, and the ledger after it; ``log`` gets what changed."""
    ledger = grid.ledger
    share = grid_share(ledger, job)
    record = decide(share)
    wanted = record.decision
    if share is not None and wanted.action is ScaleAction.SCALE_UP:
        request = job_request(
            job,
            wanted,
            memory,
            policy,
            priority=grid.priority,
            now=now,
            lease_s=grid.lease_s,
        )
        room = room_for(ledger, request, grid.capacities)
        ledger = enqueue(ledger, request, now=now)
        if room < wanted.target_nodes:
            record = decide(replace(share, max_nodes=room))
            log.append(
                (
                    logging.INFO,
                    f"Job {job} wants {wanted.target_nodes} nodes and the grid leaves it "
                    f"{room}: its claim waits in the grid queue at position "
                    f"{queue_position(ledger, job)}.",
                )
            )
            if wanted.rule is DecisionRule.DEADLINE_PRESSURE:
                ledger = _ask_shrinks(grid, ledger, request, room, now, log)
        return record, ledger
    if any(request.job == job for request in ledger.queue):
        ledger = dequeue(ledger, job, now=now)
        log.append((logging.INFO, f"Job {job} no longer waits in the grid queue."))
    return record, ledger


def _ask_shrinks(
    grid: SharedGrid,
    ledger: GridLedger,
    request: QueuedRequest,
    room: int,
    now: float,
    log: LogLines,
) -> GridLedger:
    """Deadline pressure: ask strictly-lower-priority jobs to shrink (never below their
    ``min_nodes``) for the nodes the grid does not leave the job."""
    # the nodes the sharing left the job, as one count (the rule sums free nodes, whatever
    # the provider): the shrinks make up the rest of what it wants
    # the need is the deadline size: others are shrunk only when that makes it reachable
    available = {"grid": max(0, room - request.current_nodes)}
    claim = request.as_claim()
    claim = replace(claim, min_nodes=max(claim.min_nodes, claim.deadline_nodes))
    plan = plan_preemption(claim, available, holder_claims(ledger, request.job))
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
