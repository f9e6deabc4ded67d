"""LaunchManager: one launch of one job, from its start to its stop, and its cancellation.

As KPO's ``PodManager`` owns a pod for its operator, a :class:`LaunchManager` owns the launch
its task makes; ``on_kill`` calls :meth:`~LaunchManager.stop`, a flag every step checks, so it
stops only what this manager started or adopted. Under the job's lock it attaches, adopts or
launches, each step as *record intent -> act -> confirm*. The rules: docs/operators.md
("LaunchOperator"), docs/recovery.md ("The launch record and its phases", "Retries").
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from elasticgrid_provider.core.errors import CloudApiError, JobLaunchError, RemoteHostError
from elasticgrid_provider.core.job import JobManifest, JobSnapshot, JobStatus
from elasticgrid_provider.core.launch_record import LaunchPhase, changed_fields
from elasticgrid_provider.core.launch_spec import LaunchOptions
from elasticgrid_provider.core.placement import Placement
from elasticgrid_provider.core.recovery import describe_loss, is_capacity_loss
from elasticgrid_provider.core.validation import Choice, check_number
from elasticgrid_provider.engines import connection_material
from elasticgrid_provider.hooks.cloud_reconcile import reconcile_quietly
from elasticgrid_provider.hooks.grid_capacity import GridCapacity
from elasticgrid_provider.hooks.grid_ledger import GridLedgerStore
from elasticgrid_provider.hooks.job_reports import failure_report, lost_parts, ranks_down
from elasticgrid_provider.hooks.job_store import MANIFEST_NAME, JobStore
from elasticgrid_provider.hooks.launch_files import writing
from elasticgrid_provider.hooks.launch_prepare import PreparedLaunch, prepare_launch, write_launch
from elasticgrid_provider.hooks.launch_stop import give_up, stop_launch, stop_started_launch
from elasticgrid_provider.hooks.launcher import (
    launch_connections,
    launch_processes,
    launcher_environment,
    log_tail,
    prepare_part_folder,
    read_result,
    redact_part_specs,
    start_launcher,
)
from elasticgrid_provider.hooks.remote_parts import remote_ranks_unconfirmed, spec_params

DEFAULT_STARTUP_GRACE_S = 3.0
"""How long a new launch's ranks must stay up before the launch counts as started."""
CANCELLED = "the launch was cancelled (the task was killed)"


class LaunchAction(Choice):
    """What a launch did: started the job, attached to it, adopted a start, or resized it."""

    LAUNCHED = "launched"
    ATTACHED = "attached"
    ADOPTED = "adopted"  # confirmed a start that a task killed in its grace left ``starting``
    RESIZED = "resized"


class StopAction(Choice):
    """What :meth:`LaunchManager.stop` did."""

    CANCELLED = "cancelled"  # a launch in progress: its launcher killed, what it started stopped
    STOPPED = "stopped"  # the launch this manager launched or adopted, by its launch id
    NOTHING = "nothing"  # waiting for the lock, or attached: the job keeps running


@dataclass(frozen=True)
class LaunchOutcome:
    """What :meth:`LaunchManager.launch` did and the job; ``previous_nodes`` is the size of
    the confirmed launch it replaced or attached to (None when there was none)."""

    action: LaunchAction
    snapshot: JobSnapshot
    previous_nodes: int | None = None


class LaunchManager:
    """Owns one launch of ``job_name`` and its cancellation (module docstring).

    :param store: the jobs root's :class:`JobStore`.
    :param job_name: the job.
    :param launch_id: a launch this manager owns already (a deferred task's, handed to its
        trigger), so that :meth:`stop` stops it; None until :meth:`launch` starts one.
    """

    def __init__(self, store: JobStore, job_name: str, launch_id: str | None = None) -> None:
        self.store = store
        self.job_name = job_name
        self.launch_id = launch_id
        self._cancelled = False
        self._in_progress: JobManifest | None = None
        self._launcher: subprocess.Popen[Any] | None = None
        self._found_ranks: list[str] = []  # the ranks an adoption found: ``part rank=pid``

    @property
    def log(self) -> Any:
        """The hook's logger."""
        return self.store.log

    @cached_property
    def grid(self) -> GridCapacity:
        """The grid ledger of the jobs root: a launch or resize reserves its placement there
        before it writes, stops or starts anything; a confirmed launch confirms it; a failed
        start, and a stop this manager makes, release the job's nodes."""
        return GridCapacity(GridLedgerStore(self.store.jobs_root))

    def launch(
        self,
        placement: Placement,
        options: LaunchOptions,
        *,
        startup_grace_s: float = DEFAULT_STARTUP_GRACE_S,
    ) -> LaunchOutcome:
        """Run ``placement`` as the job: attach, adopt, or launch/resize, never two copies
        (module docstring); a launch or adoption becomes this manager's :attr:`launch_id`."""
        startup_grace_s = check_number("startup_grace_s", startup_grace_s)
        job_name, store = self.job_name, self.store
        launch = prepare_launch(store, job_name, placement, options)
        self.log.info("Waiting for the lock of job %s.", job_name)
        with store.job_lock(job_name):
            if self._cancelled:
                raise JobLaunchError(
                    f"job {job_name!r} was not launched: the task was killed while it waited "
                    "for the job's lock, so nothing was started or stopped"
                )
            reconcile_quietly(store)  # instances of launches no longer current: terminated
            current = store.job_snapshot(job_name)
            previous_nodes = None
            if current is not None:
                refusal = self._attach_refusal(current, launch)
                if refusal is None and current.manifest.state is LaunchPhase.STARTING:
                    return self._adopt(current.manifest, startup_grace_s)
                if refusal is None:
                    return LaunchOutcome(LaunchAction.ATTACHED, current, current.nodes)
                self.log.info("Not attaching to job %s: %s; relaunching it.", job_name, refusal)
                running = any(part.status is JobStatus.RUNNING for part in current.parts)
                if current.manifest.state is LaunchPhase.RUNNING and running:
                    previous_nodes = current.nodes
            self.grid.reserve_launch(job_name, placement, launch.launch_id)
            try:
                manifest, intent = write_launch(store, launch, current)
                if current is not None:
                    self._stop_recorded(
                        current.manifest, f"being replaced by launch {launch.launch_id}"
                    )
            except JobLaunchError:  # nothing was stopped or started: the reservation goes
                with suppress(OSError):  # else it expires (core/fleet/ledger.py)
                    self.grid.drop_reservation(job_name, launch.launch_id)
                raise
            self._start_launch(manifest, intent)
            snapshot = self._confirm_launch(manifest, startup_grace_s)
            resized = previous_nodes is not None and previous_nodes != snapshot.nodes
            action = LaunchAction.RESIZED if resized else LaunchAction.LAUNCHED
            return LaunchOutcome(action, snapshot, previous_nodes)

    def _attach_refusal(self, current: JobSnapshot, launch: PreparedLaunch) -> str | None:
        """Why the job is not this launch, up and running (None: attach, or adopt a start)."""
        manifest = current.manifest
        if manifest.state not in (LaunchPhase.RUNNING, LaunchPhase.STARTING):
            reason = f" ({manifest.down_reason})" if manifest.down_reason else ""
            return f"its launch {manifest.launch_id} is {manifest.state}{reason}"
        idle = [
            f"{part.name} is {part.status}"
            for part in current.parts
            if part.status is not JobStatus.RUNNING
        ]
        if idle or not current.parts:
            return "not every part runs: " + (", ".join(idle) or "no parts")
        old, new = manifest.placement.nodes_by_provider(), launch.placement.nodes_by_provider()
        if old != new:
            return f"it runs at {old} and the placement is {new}"
        changed = changed_fields(
            manifest.fingerprints, launch.fingerprints(manifest.fingerprint_salt)
        )
        if changed:
            return f"its {', '.join(changed)} changed"
        return self._unconfirmed(current) if manifest.state is LaunchPhase.STARTING else None

    def _unconfirmed(self, current: JobSnapshot) -> str | None:
        """Why a launch left ``starting`` cannot be adopted (None: every part started, every
        recorded rank is a live process of that launch, none down or restarted)."""
        manifest = current.manifest
        job, launch_id = manifest.job_name, manifest.launch_id
        started = read_result(self.store.spec_folder(job, launch_id)).get("started", [])
        missing = [part.name for part in manifest.parts if part.name not in started]
        if missing:
            return f"its launch {launch_id} was cut short before {', '.join(missing)} started"
        alive = set(launch_processes(job, [launch_id]))
        found_ranks = []
        for part in current.parts:
            since = time.time()
            pids = self.store.job_manager.status(part.name).pids  # SSH hosts: a fresh probe
            if spec_params(part.spec_path) is not None:
                ranks = range(part.nodes * manifest.procs_per_node)
                gone, found = remote_ranks_unconfirmed(part.job_dir, launch_id, ranks, since)
            else:
                gone = sorted(int(rank) for rank, pid in pids.items() if int(pid) not in alive)
                found = {int(rank): str(pid) for rank, pid in pids.items()}
            restarted = list(Path(part.job_dir).glob("attempt_*")) if part.job_dir else []
            if not found or gone or ranks_down(part) or restarted:
                return (
                    f"its launch {launch_id} was cut short while starting and part {part.name} "
                    f"is not whole (rank(s) down: {gone or ranks_down(part) or 'restarted'})"
                )
            found_ranks += [f"{part.name} {rank}={pid}" for rank, pid in sorted(found.items())]
        self._found_ranks = found_ranks
        return None

    def _adopt(self, manifest: JobManifest, grace_s: float) -> LaunchOutcome:
        """Confirm a launch a killed task left ``starting`` once its ranks were up for
        ``grace_s`` since it was recorded; the launch is then this manager's own."""
        self.log.info(
            "Job %s's launch %s was left starting by a task that ended, with every part started "
            "and every rank up (rank=pid: %s); adopting it instead of starting it again.",
            manifest.job_name,
            manifest.launch_id,
            ", ".join(self._found_ranks),
        )
        self._in_progress = manifest
        recorded = datetime.fromisoformat(manifest.launched_at).timestamp()
        remaining = max(0.0, recorded + grace_s - time.time())
        snapshot = self._confirm_launch(manifest, remaining, grace_s)
        return LaunchOutcome(LaunchAction.ADOPTED, snapshot, snapshot.nodes)

    def _stop_recorded(self, manifest: JobManifest, reason: str) -> JobManifest:
        """Record ``manifest``'s launch ``stopping`` (a failed write stops nothing), stop it."""
        try:
            stopping = self.store.record(manifest, LaunchPhase.STOPPING, reason)
        except JobLaunchError as exc:
            raise JobLaunchError(
                f"job {manifest.job_name!r} was not relaunched: {exc}; nothing was stopped "
                "or started"
            ) from None
        stop_launch(self.store, stopping)
        return stopping

    def _start_launch(self, manifest: JobManifest, intent: Path) -> JobManifest:
        """Step 4: put the intent in place as the job's manifest, start the parts."""
        target = self.store.job_folder(manifest.job_name) / MANIFEST_NAME
        with writing(target):
            intent.replace(target)
        self._in_progress = manifest
        spec_folder = intent.parent
        jobs_root = self.store.jobs_root
        try:
            for record in manifest.parts:
                prepare_part_folder(jobs_root, record.name)
            failure = self._run_launcher(manifest, spec_folder)
        finally:
            for record in manifest.parts:  # the launcher redacts too, unless it was killed first
                redact_part_specs(jobs_root, record.name, record.spec_path)
        if failure is not None:
            # a cloud with no room for a part (its error says so): capacity, not a crash, so
            # the next scale check recovers the launch elsewhere (core/recovery.py)
            no_room = failure.startswith("provider ") and is_capacity_loss(failure)
            phase = LaunchPhase.LOST if no_room else LaunchPhase.DOWN
            stopped, untracked = self._give_up(manifest, failure, phase)
            leftovers = (
                f", and {len(untracked)} process(es) of this launch that iroh-tinker had not "
                f"recorded (pids {', '.join(map(str, untracked))})"
                if untracked
                else ""
            )
            raise JobLaunchError(
                f"job {manifest.job_name!r} could not start: {failure}; stopped the parts "
                f"already started: {', '.join(stopped) or 'none'}{leftovers}"
            )
        return manifest

    def _run_launcher(self, manifest: JobManifest, spec_folder: Path) -> str | None:
        """Start the parts in a launcher process and wait; returns what failed, if anything."""
        if self._cancelled:
            return CANCELLED
        try:  # here, where the task's supervisor answers: the launcher reads no connection
            wanted = launch_connections(record.spec_path for record in manifest.parts)
            material = connection_material.resolve(*wanted)
        except (CloudApiError, RemoteHostError) as error:
            return str(error)
        env = launcher_environment(manifest.job_name, manifest.launch_id)
        self._launcher = start_launcher(spec_folder, env, material)
        try:
            returncode = self._launcher.wait()
        finally:
            self._launcher = None
        result = read_result(spec_folder)
        if self._cancelled:
            return CANCELLED
        failed = result.get("failed")
        if failed:
            provider = next(
                (part.provider for part in manifest.parts if part.name == failed["part"]), "?"
            )
            return f"provider {provider!r} (part {failed['part']}) failed: {failed['error']}"
        if returncode != 0 or len(result.get("started", [])) != len(manifest.parts):
            return (
                f"the launcher process exited with status {returncode} "
                f"({log_tail(spec_folder) or 'no output'})"
            )
        return None

    def _confirm_launch(
        self, manifest: JobManifest, wait_s: float, grace_s: float | None = None
    ) -> JobSnapshot:
        """Step 5: after ``wait_s``, every part runs (or is done) with no rank down; a lost part
        is named with its provider, global ranks and cause. ``grace_s`` (default ``wait_s``) is
        the start-up grace the reason names."""
        store = self.store
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and not self._cancelled:
            time.sleep(0.1)
        snapshot = store.job_snapshot(manifest.job_name)
        assert snapshot is not None  # the manifest was written by this launch
        problems = [CANCELLED] if self._cancelled else []
        losses = {lost.part: lost for lost in lost_parts(store, snapshot, confirmed_only=False)}
        lost = [describe_loss(losses[part.name]) for part in snapshot.parts if part.name in losses]
        for part in snapshot.parts:
            attempts = Path(part.job_dir).glob("attempt_*") if part.job_dir else ()
            restarted = sorted(marker.name.split("_", 1)[1] for marker in attempts)
            if part.name in losses:
                continue
            if part.status not in (JobStatus.RUNNING, JobStatus.DONE):
                detail = f" ({part.last_error})" if part.last_error else ""
                problems.append(f"part {part.name} is {part.status}{detail}")
            elif restarted:
                problems.append(f"part {part.name} had to restart rank(s) {', '.join(restarted)}")
        if not problems and not lost:
            store.record(manifest, LaunchPhase.RUNNING)
            self._in_progress = None
            self.launch_id = manifest.launch_id
            self.grid.confirm(manifest.job_name, manifest.launch_id)
            confirmed = store.job_snapshot(manifest.job_name)
            assert confirmed is not None
            return confirmed
        report = failure_report(store, snapshot)
        if report:
            self.log.error("Job %s did not start:\n%s", manifest.job_name, report)
        grace = wait_s if grace_s is None else grace_s
        what = "; ".join([*lost, *problems])
        reason = f"its ranks were not all up {grace:g} s after the start ({what})"
        # capacity taken away (a notice says so; the other parts' ranks may die with it):
        # the launch task, or the next scale check, recovers it
        taken = any(is_capacity_loss(loss.cause) for loss in losses.values())
        phase = LaunchPhase.LOST if taken and not problems else LaunchPhase.DOWN
        self._give_up(manifest, reason, phase)
        raise JobLaunchError(f"job {manifest.job_name!r} is down: {reason}.")

    def _give_up(
        self, manifest: JobManifest, reason: str, phase: LaunchPhase = LaunchPhase.DOWN
    ) -> tuple[list[str], list[int]]:
        """:func:`~elasticgrid_provider.hooks.launch_stop.give_up` on the launch in progress."""
        stopped = give_up(self.store, manifest, reason, phase)
        self._in_progress = None
        self.release_nodes()
        return stopped

    @property
    def stop_action(self) -> StopAction:
        """What :meth:`stop` would do now (``on_kill`` says so before it stops anything)."""
        if self._in_progress is not None:
            return StopAction.CANCELLED
        return StopAction.NOTHING if self.launch_id is None else StopAction.STOPPED

    def stop(self) -> StopAction:
        """``on_kill``: stop what this manager started (a launch starting has its launcher
        killed and what it started stopped; one launched or adopted is stopped by its launch
        id), and cancel every step still to come; a job it attached to, or has not launched
        yet (still waiting for the lock), keeps running."""
        self._cancelled = True
        action, manifest = self.stop_action, self._in_progress
        if manifest is not None:
            launcher = self._launcher
            if launcher is not None and launcher.poll() is None:
                with suppress(OSError):
                    os.killpg(launcher.pid, signal.SIGKILL)
            stop_launch(self.store, manifest)
        elif self.launch_id is not None:
            stop_started_launch(self.store, self.job_name, self.launch_id)
        if action is not StopAction.NOTHING:
            self.release_nodes()
        return action

    def release_nodes(self) -> None:
        """Give the job's nodes back to the grid (it ended or was stopped;
        :meth:`~elasticgrid_provider.hooks.grid_capacity.GridCapacity.give_back`)."""
        self.grid.give_back(self.job_name, self.launch_id, self.log)
