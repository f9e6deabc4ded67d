"""Stopping a recorded launch: every process of it, tracked by iroh-tinker or not.

A launch is stopped by its launch id, never by its job's name alone, so a stop never
touches a later launch (another task's resize). The caller holds the job's lock, except a
killed task that waited :data:`STOP_LOCK_WAIT_S` for it in vain. The rules:
docs/recovery.md ("The launch record and its phases"), docs/operators.md ("StopJobOperator").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from elasticgrid_provider.core.errors import JobLaunchError, JobNotFoundError, JobStopError
from elasticgrid_provider.core.job import JobManifest, JobSnapshot, JobStatus, PartRecord
from elasticgrid_provider.core.job_stop import JobStopReport, StoppedPart
from elasticgrid_provider.core.launch_record import LaunchPhase
from elasticgrid_provider.core.launch_spec import check_job_name
from elasticgrid_provider.core.rank_environment import ENV_PART
from elasticgrid_provider.engines.remote_agent import process_environment
from elasticgrid_provider.hooks.grid_capacity import GridCapacity
from elasticgrid_provider.hooks.grid_ledger import GridLedgerStore
from elasticgrid_provider.hooks.job_store import JobStore
from elasticgrid_provider.hooks.launcher import (
    is_launcher,
    launch_processes,
    own_processes,
    terminate,
)
from elasticgrid_provider.hooks.remote_parts import sweep_remote_launch

STOP_LOCK_WAIT_S = 2.0
"""How long a killed task waits for the job's lock before it stops its own launch anyway
(Airflow SIGKILLs 5 s after SIGTERM); only that launch's parts and processes are touched."""
PART_STOP_GRACE_S = 10.0
"""How long a rank's program has, after SIGTERM, to exit before it is SIGKILLed."""
KILLED_REASON = "stopped: the task that launched it was killed"
LOCK_POLL_S = 1.0
"""How often a stop that waits for the job's lock looks whether its task was killed."""


def stop_launch(store: JobStore, manifest: JobManifest) -> tuple[list[str], list[int]]:
    """Stop a launch: launcher, recorded parts, other pids; returns (parts, unrecorded pids)."""
    job, launch_ids = manifest.job_name, [manifest.launch_id]
    # the launcher first, so it starts no more parts; the sweeps last, for what it left
    terminate([pid for pid in launch_processes(job, launch_ids) if is_launcher(pid)], 0.0)
    stopped = stop_parts(store, job, manifest.parts, manifest.launch_id)
    untracked = terminate(launch_processes(job, launch_ids))
    remote = sweep_remote_launch(job, manifest.launch_id, store.launch_specs(manifest))
    if untracked or remote:
        store.log.info(
            "Stopped %d process(es) of launch %s that iroh-tinker had not recorded: %s",
            len(untracked) + len(remote),
            manifest.launch_id,
            ", ".join([*map(str, untracked), *remote]),
        )
    return stopped, untracked


def stop_parts(
    store: JobStore, job_name: str, parts: tuple[PartRecord, ...], launch_id: str | None = None
) -> list[str]:
    """Stop the parts that still run; with ``launch_id``, only those that launch started.
    A part's ranks here go first (runner first, :func:`terminate`), then iroh-tinker's stop."""
    stopped = []
    for part in parts:
        try:
            state = store.job_manager.status(part.name)
        except KeyError:  # never started
            continue
        if launch_id is not None and Path(state.spec_path).parent.name != launch_id:
            continue  # the part now runs another launch's spec
        if state.status == JobStatus.RUNNING:
            terminate(own_processes(job_name, state.pids.values()), PART_STOP_GRACE_S)
            store.job_manager.stop(part.name)
            store.log.info("Stopped part %s.", part.name)
            stopped.append(part.name)
    return stopped


def give_up(
    store: JobStore, manifest: JobManifest, reason: str, phase: LaunchPhase = LaunchPhase.DOWN
) -> tuple[list[str], list[int]]:
    """Under the job's lock: record a launch that cannot go on ``stopping``, stop it
    (:func:`stop_launch`), record it ``phase`` (``down``, or ``lost``) with ``reason``."""
    try:
        manifest = store.record(manifest, LaunchPhase.STOPPING, reason)
    except JobLaunchError as exc:  # stop it all the same: a dead launch must not run on
        store.log.warning("Stopping job %s unrecorded: %s", manifest.job_name, exc)
    stopped = stop_launch(store, manifest)
    store.record(manifest, phase, reason)
    return stopped


def stop_started_launch(store: JobStore, job_name: str, launch_id: str) -> JobSnapshot | None:
    """Stop the job only if it still runs ``launch_id`` (what a killed task started); a later
    launch (another task's resize) is left alone, told apart by its spec folder."""
    with store.job_lock(job_name, timeout=STOP_LOCK_WAIT_S) as held:
        manifest = store.read_manifest(job_name)
        if manifest is None or manifest.launch_id != launch_id:
            terminate(launch_processes(job_name, [launch_id]))
            sweep_remote_launch(job_name, launch_id, store.spec_files(job_name, launch_id))
            return None
        if held:
            give_up(store, manifest, KILLED_REASON)
        else:
            stop_launch(store, manifest)
        return store.job_snapshot(job_name)


def stop_job(
    store: JobStore,
    job_name: str,
    reason: str,
    *,
    cancelled: Callable[[], bool] = lambda: False,
) -> JobStopReport:
    """A user's stop of ``job_name`` on every engine (docs/operators.md, "StopJobOperator"):
    what it stopped, or why nothing was left. :class:`JobNotFoundError` when the job has no
    launch record here; :class:`JobStopError` when ``cancelled()`` turned true while it waited
    for the lock (nothing was stopped), or when the stop could not finish (the record says
    ``stopping``)."""
    check_job_name(job_name)
    if store.read_manifest(job_name) is None:  # the folder of a job that does not exist stays so
        raise JobNotFoundError(not_launched(store, job_name))
    with _locked(store, job_name, cancelled):
        manifest = store.read_manifest(job_name)
        snapshot = store.job_snapshot(job_name)
        assert manifest is not None and snapshot is not None  # a manifest is never deleted
        launches = store.launch_ids(job_name)
        running = [part for part in snapshot.parts if part.status is JobStatus.RUNNING]
        finished = snapshot.status is JobStatus.DONE and not manifest.state.is_unfinished
        over = manifest.state.is_terminal or finished
        grid = GridCapacity(GridLedgerStore(store.jobs_root))
        live = launch_processes(job_name, launches)
        if over and not running and not live:
            released = grid.give_back(job_name, manifest.launch_id, store.log)
            return _report(store, manifest, _nothing_left(snapshot), released=released)
        # which part each live process belongs to (a rank whose runner is gone is still its)
        part_of = {pid: process_environment(pid).get(ENV_PART) for pid in live}
        recorded = manifest
        if not manifest.state.is_terminal:  # an ended launch keeps its phase and reason
            try:
                recorded = store.record(manifest, LaunchPhase.STOPPING, reason)
            except JobLaunchError as exc:  # stop it all the same: the user asked for it
                store.log.warning("Stopping job %s unrecorded: %s", job_name, exc)
        stopped, untracked = _stop_every_launch(store, recorded, launches)
        released = grid.give_back(job_name, manifest.launch_id, store.log)
        if not manifest.state.is_terminal:
            try:
                recorded = store.record(recorded, LaunchPhase.STOPPED, reason)
            except JobLaunchError as exc:
                raise JobStopError(
                    f"job {job_name!r} was stopped, but its launch {manifest.launch_id} could "
                    f"not be recorded stopped ({exc}); the next stop records it"
                ) from None
        touched = {*stopped, *(part_of.get(pid) for pid in untracked)}
        parts = [part for part in manifest.parts if part.name in touched]
        for part in parts:  # its ranks outlived their runner: it was stopped, not failed
            if part.name not in stopped:
                store.job_manager.stop(part.name)
        return _report(
            store,
            recorded,
            None if parts or untracked else _nothing_left(snapshot),
            parts=parts,
            other_processes=len(untracked),
            released=released,
        )


def _stop_every_launch(
    store: JobStore, recorded: JobManifest, launches: Sequence[str]
) -> tuple[list[str], list[int]]:
    """Stop the recorded launch, its parts wherever their spec came from, and any process of
    an earlier launch: the parts stopped and the pids terminated outside them. An engine's or
    a host's error leaves the record saying what is left, for the next stop to finish."""
    job_name = recorded.job_name
    try:
        stopped, untracked = stop_launch(store, recorded)
        stopped += stop_parts(store, job_name, recorded.parts)  # on another launch's spec
        untracked += terminate(launch_processes(job_name, launches))  # earlier launches'
    except Exception as exc:  # an engine's or a host's: the record says what is left
        raise JobStopError(
            f"job {job_name!r} was not fully stopped ({exc}); its launch "
            f"{recorded.launch_id} is recorded {recorded.state}, and the next stop finishes it"
        ) from exc
    return stopped, untracked


def not_launched(store: JobStore, job_name: str) -> str:
    """The sentence for a stop of a job with no launch record under the jobs root."""
    return (
        f"job {job_name!r} was never launched under {store.jobs_root} (it has no launch "
        "record there), so there is nothing to stop; check the job name and that this is "
        "the jobs root the workers share"
    )


@contextmanager
def _locked(store: JobStore, job_name: str, cancelled: Callable[[], bool]) -> Iterator[None]:
    """Hold the job's lock, waiting as long as it takes unless ``cancelled()`` turns true."""
    waited = False
    while True:
        with store.job_lock(job_name, timeout=LOCK_POLL_S) as held:
            if held:
                yield
                return
        if cancelled():
            raise JobStopError(
                f"job {job_name!r} was not stopped: the task was killed while it waited for "
                "the job's lock, and nothing was stopped"
            )
        if not waited:
            store.log.info(
                "Waiting for the lock of job %s: a launch, resize or scale check of it holds it.",
                job_name,
            )
            waited = True


def _nothing_left(snapshot: JobSnapshot) -> str:
    """Why a job has nothing left to stop: its launch ended, or every part of it did."""
    manifest = snapshot.manifest
    if manifest.state.is_terminal:
        why = f" ({manifest.down_reason})" if manifest.down_reason else ""
        return f"its launch {manifest.launch_id} is {manifest.state}{why}"
    return f"every part of its launch {manifest.launch_id} had ended ({snapshot.status})"


def _report(
    store: JobStore,
    manifest: JobManifest,
    nothing_left: str | None,
    *,
    parts: Iterable[PartRecord] = (),
    other_processes: int = 0,
    released: dict[str, int],
) -> JobStopReport:
    snapshot = store.job_snapshot(manifest.job_name)
    assert snapshot is not None
    order = {name: index for index, name in enumerate(manifest.placement.nodes_by_provider())}
    return JobStopReport(
        job_name=manifest.job_name,
        launch_id=manifest.launch_id,
        launch_state=snapshot.manifest.state,
        job_status=snapshot.status,
        parts=tuple(StoppedPart.of(manifest, part) for part in parts),
        other_processes=other_processes,
        # in the placement's order, as the parts are listed
        released_nodes=dict(
            sorted(released.items(), key=lambda share: order.get(share[0], len(order)))
        ),
        nothing_left=nothing_left,
    )
