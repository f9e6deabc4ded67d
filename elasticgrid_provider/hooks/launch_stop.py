"""Stopping a recorded launch: every process of it, tracked by iroh-tinker or not.

A launch is stopped by its launch id, never by its job's name alone, so a stop
never touches a later launch (another task's resize):

1. its launcher process, if one still starts parts;
2. its parts that iroh-tinker recorded and that still run that launch's spec:
   a part's ranks on this machine first, runner first (iroh's runner would
   restart the rank it is asked to stop, whatever ``recovery`` says), with
   :data:`PART_STOP_GRACE_S` to checkpoint; then iroh-tinker's own stop;
3. every process left that carries the launch id in its environment, on this
   machine and on the SSH hosts of its specs.

:func:`give_up` wraps that in the launch record: ``stopping`` before (a failed
write stops it all the same: a dead launch must not run on), then ``down`` or
``lost`` with the reason. The caller holds the job's lock, except a killed task
that waited :data:`STOP_LOCK_WAIT_S` for it in vain (:func:`stop_started_launch`).
"""

from __future__ import annotations

from pathlib import Path

from elasticgrid_provider.core.errors import JobLaunchError
from elasticgrid_provider.core.job import JobManifest, JobSnapshot, JobStatus, PartRecord
from elasticgrid_provider.core.launch_record import LaunchPhase
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


def stop_launch(store: JobStore, manifest: JobManifest) -> tuple[list[str], list[int]]:
    """Stop a launch: launcher, recorded parts, other pids; returns (parts, unrecorded pids)."""
    job, launch_ids = manifest.job_name, [manifest.launch_id]
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
    """Stop the parts that still run; with ``launch_id``, only those that launch started
    (module docstring, step 2)."""
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
