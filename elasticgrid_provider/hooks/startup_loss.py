"""Capacity a provider takes away while a launch starts: found, and placed again without it.

A launch whose ranks are not all up after the start-up grace is recorded ``lost`` when
every missing part was taken away with a notice saying so (a spot reclaim,
:func:`~elasticgrid_provider.core.recovery.is_capacity_loss`), else ``down``. A lost start
is the same loss a running job can suffer, and is recovered the same way: the providers
that lost the parts are left out (quarantined for this launch, the reason in the new
placement's ``left_out``) and the same number of nodes is placed over the rest of the grid.
"""

from __future__ import annotations

from collections.abc import Mapping

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.launch_record import LaunchPhase
from elasticgrid_provider.core.placement import Placement
from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.recovery import LostPart, describe_loss
from elasticgrid_provider.hooks.job_reports import lost_parts
from elasticgrid_provider.hooks.job_store import JobStore


def startup_losses(store: JobStore, job_name: str) -> tuple[LostPart, ...]:
    """The parts the job's last launch lost to a provider while it started (its record says
    ``lost``); () when it failed for another reason, or was never recorded."""
    snapshot = store.job_snapshot(job_name)
    if snapshot is None or snapshot.manifest.state is not LaunchPhase.LOST:
        return ()
    return lost_parts(store, snapshot, confirmed_only=False)


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
