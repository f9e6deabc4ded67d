"""Capacity a provider takes away while a launch starts: found, and placed again without it.

A launch whose ranks are not all up after the start-up grace is recorded ``lost`` when a
part was taken away with a notice saying so (a spot reclaim,
:func:`~elasticgrid_provider.core.recovery.is_capacity_loss`; the other parts' ranks may die
with it) and nothing else went wrong, else ``down``. A lost start
is the same loss a running job can suffer, and is recovered the same way: the providers
that lost the parts are left out (the reason in the new placement's ``left_out``) and the
same number of nodes is placed over the rest of the grid. They stay quarantined after the
launch, in the job's scale state (:func:`quarantine_startup_loss`), as after a later loss.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from elasticgrid_provider.core.clock import epoch_now
from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.launch_record import LaunchPhase
from elasticgrid_provider.core.placement import Placement
from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.recovery import (
    LostPart,
    QuarantineEntry,
    describe_loss,
    quarantine_reasons,
    taken_away,
)
from elasticgrid_provider.hooks.job_reports import lost_parts
from elasticgrid_provider.hooks.job_store import JobStore


def startup_losses(store: JobStore, job_name: str) -> tuple[LostPart, ...]:
    """The parts a provider took away while the job's last launch started (its record says
    ``lost``; parts whose ranks only died with them are not among them,
    :func:`~elasticgrid_provider.core.recovery.taken_away`); () when it failed for another
    reason, or was never recorded."""
    snapshot = store.job_snapshot(job_name)
    if snapshot is None or snapshot.manifest.state is not LaunchPhase.LOST:
        return ()
    return taken_away(lost_parts(store, snapshot, confirmed_only=False))


def replace_lost(
    job_name: str,
    planner: GridPlanner,
    placement: Placement,
    lost: tuple[LostPart, ...],
    *,
    left_out: Mapping[str, str],
    held_by_others: Mapping[str, int] | None = None,
) -> Placement:
    """``placement``'s nodes over ``planner``'s grid without the providers that lost parts
    (and those already ``left_out``); one sentence naming the loss when they do not fit."""
    leave_out = dict(left_out)
    for part in lost:
        leave_out[part.provider] = f"lost capacity while the launch started ({part.cause})"
    try:
        return planner.plan(
            placement.total_nodes, leave_out=leave_out, held_by_others=held_by_others
        )
    except ElasticGridError as exc:
        losses = ", ".join(map(describe_loss, lost))
        raise ElasticGridError(
            f"job {job_name!r} lost {losses} while it started, and its "
            f"{placement.total_nodes} nodes do not fit on the grid without "
            f"{', '.join(sorted(leave_out))}: {exc}"
        ) from None


def job_quarantine(store: JobStore, job_name: str) -> dict[str, str]:
    """``{provider: why}`` the job's scale state quarantines now ({} when it has no state, or
    it cannot be read: the scale check that reads it says why)."""
    from elasticgrid_provider.core.errors import StateReadError

    try:
        state = store.read_scale_state(job_name)
    except (ElasticGridError, StateReadError):
        return {}
    return quarantine_reasons(state.recovery.active_quarantine(epoch_now()))


def quarantine_startup_loss(
    store: JobStore, job_name: str, lost: tuple[LostPart, ...], quarantine_s: float
) -> None:
    """Quarantine each provider that took a part of ``lost`` away while the launch started,
    for ``quarantine_s`` seconds, in the job's scale state, under the job's lock: the scale
    check's re-plans leave it out as they leave out a provider that lost a part later
    (:func:`~elasticgrid_provider.core.recovery.decide_recovery`). A state that cannot be
    read or written is logged: the launch still places the nodes without those providers."""
    from elasticgrid_provider.core.errors import StateReadError

    if quarantine_s <= 0 or not lost:
        return
    now = epoch_now()
    entries = tuple(
        QuarantineEntry(
            part.provider,
            now,
            now + quarantine_s,
            f"lost part {part.part} while the launch started: {part.cause}",
        )
        for part in lost
    )
    names = ", ".join(sorted({part.provider for part in lost}))
    try:
        with store.job_lock(job_name):
            state = store.read_scale_state(job_name)
            memory = replace(state.recovery, quarantine=state.recovery.quarantine + entries)
            store.write_scale_state(
                replace(state, recovery=memory, revision=state.revision + 1, updated_at=now)
            )
    except (ElasticGridError, StateReadError, OSError) as exc:
        store.log.warning(
            "Provider(s) %s stay left out of this launch only: job %s's scale state, where "
            "its later placements read the quarantine, could not be updated (%s).",
            names,
            job_name,
            exc,
        )
        return
    store.log.info(
        "Quarantined provider(s) %s for %gs in job %s's scale state: its later placements "
        "leave them out too.",
        names,
        quarantine_s,
        job_name,
    )
