"""Reconcile the grid ledger with the jobs' launch records, or rebuild it from them alone.

**Reconcile** makes the ledger match the jobs' launch records (their manifests);
**rebuild** makes one from the records alone (a lost or corrupt ledger). Pure: no I/O, no
clock (``now`` is given, epoch seconds). The rules: docs/fleet-ledger.md ("The ledger").
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace

from elasticgrid_provider.core.fleet.ledger import (
    REBUILT_PRIORITY,
    GridLedger,
    Holding,
    HoldingPhase,
    shrink_pending,
)
from elasticgrid_provider.core.fleet.pools import pool_records
from elasticgrid_provider.core.job import JobManifest

RESERVATION_GRACE_S = 600.0  # a reservation no launch record confirmed within this is dropped


def _record_holdings(
    manifest: JobManifest, known: Iterable[Holding], now: float
) -> tuple[Holding, ...]:
    """The record's launch as held holdings, keeping the job's priority and min_nodes, and
    the fields of a newer minor each holding of that launch has (core/records.py)."""
    known = list(known)
    source = next((h for h in known if h.launch_id == manifest.launch_id), None)
    source = source or (known[0] if known else None)
    confirmed_at = {h.provider: h.recorded_at for h in known if h.phase == HoldingPhase.HELD}
    same_launch = {h.provider: h.extras for h in known if h.launch_id == manifest.launch_id}
    held = []
    for share in manifest.placement.assignments:
        name = share.provider.name
        if source is not None and source.launch_id == manifest.launch_id:
            recorded_at = confirmed_at.get(name, now)
        else:
            recorded_at = now
        held.append(
            Holding(
                job=manifest.job_name,
                provider=name,
                nodes=share.nodes,
                phase=HoldingPhase.HELD,
                launch_id=manifest.launch_id,
                recorded_at=recorded_at,
                priority=source.priority if source else REBUILT_PRIORITY,
                min_nodes=source.min_nodes if source else manifest.nodes,
                extras=same_launch.get(name, {}),
            )
        )
    return tuple(held)


def reconcile(
    ledger: GridLedger,
    records: Mapping[str, JobManifest | None],
    *,
    now: float,
    grace_s: float = RESERVATION_GRACE_S,
    unreadable: Collection[str] = (),
) -> GridLedger:
    """The ledger matching the launch records (docs/fleet-ledger.md): ``records`` maps each
    job to its manifest (None: no record); a job missing from it has no record; the
    jobs in ``unreadable`` keep their entries."""
    jobs = sorted(set(ledger.jobs) | set(records) | set(unreadable))
    holdings: list[Holding] = []
    pools = dict(ledger.pools or {})
    for job in jobs:
        known = ledger.holdings_of(job)
        if job in unreadable:
            holdings.extend(known)
            continue
        manifest = records.get(job)
        released = manifest is not None and (ledger.ended or {}).get(job) == manifest.launch_id
        live = manifest is not None and not manifest.state.is_terminal and not released
        recorded = manifest.launch_id if manifest is not None else ""
        if manifest is not None and live:
            holdings.extend(_record_holdings(manifest, known, now))
            pools.update(pool_records(share.provider for share in manifest.placement.assignments))
        for holding in known:
            in_flight = (
                holding.phase == HoldingPhase.RESERVED
                and holding.launch_id > recorded
                and now - holding.recorded_at <= grace_s
            )
            if in_flight:
                holdings.append(holding)
    queue = tuple(r for r in ledger.queue if not (r.expired(now) or r.lapsed(now)))
    ended = {
        job: launch_id
        for job, launch_id in (ledger.ended or {}).items()
        if job in unreadable or getattr(records.get(job), "launch_id", None) == launch_id
    }
    settled = replace(
        ledger, holdings=tuple(holdings), queue=queue, ended=ended or None, pools=pools or None
    )
    shrinks = tuple(shrink for shrink in ledger.shrinks if shrink_pending(settled, shrink))
    return replace(settled, shrinks=shrinks, updated_at=now)


def rebuild(
    records: Mapping[str, JobManifest | None],
    *,
    now: float,
    capacities: Mapping[str, int] | None = None,
) -> GridLedger:
    """A ledger from the launch records alone (the stored one was lost or corrupt)."""
    fresh = GridLedger(capacities=dict(capacities) if capacities is not None else None)
    return reconcile(fresh, records, now=now)
