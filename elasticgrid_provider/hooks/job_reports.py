"""What a job's parts tell: lost ranks, failure reports, and the step logs a check reads.

Read-only views over a :class:`~elasticgrid_provider.hooks.job_store.JobStore`. The rules:
docs/recovery.md ("Recovering from lost capacity"), docs/remote-hosts.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from elasticgrid_provider.core.errors import RemoteHostError
from elasticgrid_provider.core.job import JobSnapshot, JobStatus, PartRecord
from elasticgrid_provider.core.recovery import LostPart, loss_cause, part_is_lost
from elasticgrid_provider.core.state import ScaleState
from elasticgrid_provider.core.step_log import StepLogChunk, read_step_log
from elasticgrid_provider.hooks.job_store import JobStore
from elasticgrid_provider.hooks.remote_parts import (
    listed_down_ranks,
    pull_step_log,
    spec_params,
    with_down_ranks,
)

DEFAULT_TAIL = 20  # log lines a report shows per rank


def unfinished(part: PartRecord, ranks: Iterable[int]) -> list[int]:
    """The ranks that did not finish successfully (iroh-tinker writes ``done_<rank>``)."""
    return [rank for rank in ranks if not (Path(part.job_dir) / f"done_{rank}").exists()]


def ranks_down(part: PartRecord) -> list[int]:
    """Ranks iroh-tinker reports down (``down ranks: [..]``), less those that finished."""
    return unfinished(part, listed_down_ranks(part.last_error))


def lost_ranks(part: PartRecord, per_node: int) -> list[int] | None:
    """A lost part's ranks that did not finish; None when the part is not lost."""
    down = ranks_down(part) if part.status in (JobStatus.RUNNING, JobStatus.STOPPED) else []
    if part.status == JobStatus.STOPPED:  # stopped after its ranks went down: lost before
        return down or None
    if not part_is_lost(part.status, down):
        return None
    return down or unfinished(part, range(part.nodes * per_node))


def rank_log(store: JobStore, part_name: str, rank: int, tail: int) -> str:
    """The last ``tail`` lines of a rank's log; empty when there is none to read."""
    try:
        return store.job_manager.logs(part_name, rank=rank, tail=tail)
    except (KeyError, OSError):
        return ""


def failure_report(store: JobStore, snapshot: JobSnapshot, tail: int = DEFAULT_TAIL) -> str:
    """For each lost part (failed, or running with ranks down), the log tail of each rank
    that did not finish, named by its part rank and its global rank."""
    return "\n".join(
        f"part {part.name} rank {rank} (global rank {part.rank_offset + rank}) failed "
        f"({with_down_ranks(part.last_error, lost) or 'no error recorded'}); "
        f"last {tail} log lines:\n"
        f"{rank_log(store, part.name, rank, tail)}"
        for part in snapshot.parts
        if (lost := lost_ranks(part, snapshot.manifest.procs_per_node)) is not None
        for rank in lost or [0]
    )


def lost_parts(
    store: JobStore,
    snapshot: JobSnapshot,
    tail: int = DEFAULT_TAIL,
    *,
    confirmed_only: bool = True,
) -> tuple[LostPart, ...]:
    """The parts that lost ranks, with their global ranks and the cause (core/recovery.py):
    the last cause line of the first lost rank's log, else iroh-tinker's ``down ranks``.
    Only a confirmed launch, or one ``lost`` while starting, loses capacity, unless
    ``confirmed_only`` is False."""
    if confirmed_only and not snapshot.manifest.state.can_lose_capacity:
        return ()
    lost = []
    for part in snapshot.parts:
        ranks = lost_ranks(part, snapshot.manifest.procs_per_node)
        if ranks is None:
            continue
        log_tail = rank_log(store, part.name, ranks[0] if ranks else 0, tail)
        notice = with_down_ranks(part.last_error, ranks)  # iroh-tinker's words, part ranks
        lost.append(
            LostPart(
                part=part.name,
                provider=part.provider,
                nodes=part.nodes,
                ranks=tuple(part.rank_offset + rank for rank in ranks),
                cause=loss_cause(log_tail, notice),
            )
        )
    return tuple(lost)


def read_step_logs(
    store: JobStore, snapshot: JobSnapshot, state: ScaleState, tail: int
) -> list[StepLogChunk]:
    """What each part's step log gained since the state's cursor for it; a log never read
    before is read from its end, at most ``tail`` samples at the job's current size."""
    from elasticgrid_provider.runtime import STEP_LOG_NAME

    for part in snapshot.parts:
        params = spec_params(part.spec_path)
        if params is not None and part.job_dir:  # rank 0's log is on its host: pull it
            try:
                pull_step_log(params, part.name, Path(part.job_dir) / STEP_LOG_NAME)
            except (OSError, RemoteHostError) as exc:  # the check goes on without them
                store.log.warning("Could not pull the step log of part %s: %s", part.name, exc)
    paths = [Path(part.job_dir) / STEP_LOG_NAME for part in snapshot.parts if part.job_dir]
    cursor = state.log_cursor
    return [read_step_log(p, cursor(str(p)), tail=tail, nodes=snapshot.nodes) for p in paths]
