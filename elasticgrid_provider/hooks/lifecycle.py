"""The job lifecycle of :class:`~elasticgrid_provider.hooks.elasticgrid.ElasticGridHook`.

Launch, attach, adopt, resize and stop, each as *record intent -> act ->
confirm* (:mod:`elasticgrid_provider.core.launch_record`), under the job's
lock. A launcher child process (:mod:`elasticgrid_provider.hooks.launcher`)
starts the parts, so no rank inherits the task's descriptors; the files a
launch needs are written before anything of the running job is stopped
(:mod:`elasticgrid_provider.hooks.launch_files`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterable
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from elasticgrid_provider.core.clock import utc_iso_now
from elasticgrid_provider.core.errors import JobLaunchError
from elasticgrid_provider.core.job import JobManifest, JobSnapshot, JobStatus, PartRecord
from elasticgrid_provider.core.launch_record import (
    LaunchPhase,
    changed_fields,
    launch_fingerprints,
)
from elasticgrid_provider.core.launch_spec import LaunchOptions, LaunchPart
from elasticgrid_provider.core.placement import Placement
from elasticgrid_provider.core.rank_environment import ENV_JOB, ENV_LAUNCH_ID
from elasticgrid_provider.core.recovery import LostPart, describe_loss, is_capacity_loss
from elasticgrid_provider.core.rendezvous import parse_rendezvous
from elasticgrid_provider.core.validation import Choice, check_number
from elasticgrid_provider.hooks.launch_files import write_json, write_launch_files, writing
from elasticgrid_provider.hooks.launcher import (
    is_launcher,
    launch_processes,
    log_tail,
    own_processes,
    prepare_part_folder,
    read_result,
    redact_part_specs,
    start_launcher,
    terminate,
)
from elasticgrid_provider.hooks.remote_parts import listed_down_ranks, sweep_remote_launch

if TYPE_CHECKING:
    from airflow.sdk.types import Logger
    from iroh_tinker.cloud import JobManager

MANIFEST_NAME = "manifest.json"
DEFAULT_STARTUP_GRACE_S = 3.0
"""How long a new launch's ranks must stay up before the launch counts as started."""
STOP_LOCK_WAIT_S = 2.0
"""How long a killed task waits for the job's lock before it stops its own launch anyway
(Airflow SIGKILLs 5 s after SIGTERM); only that launch's parts and processes are touched."""
PART_STOP_GRACE_S = 10.0
"""How long a rank's program has, after SIGTERM, to exit before it is SIGKILLed."""
CANCELLED = "the launch was cancelled (the task was killed)"


@dataclass(frozen=True)
class PreparedLaunch:
    """A launch rendered and validated, not yet started: its id, options and parts."""

    job_name: str
    launch_id: str
    placement: Placement
    options: LaunchOptions
    parts: tuple[LaunchPart, ...]
    fingerprint_salt: str
    on_worker: bool = True
    """Whether every part runs on this machine (so a ``dir:`` rendezvous is made here)."""

    def fingerprints(self, salt: str) -> dict[str, str]:
        """The salted fingerprints of what this launch runs (``run``, ``envs``, ``setup``)."""
        return launch_fingerprints(self.options.run, self.options.envs, self.options.setup, salt)


class LaunchAction(Choice):
    """What a launch did: started the job, attached to it, adopted a start, or resized it."""

    LAUNCHED = "launched"
    ATTACHED = "attached"
    ADOPTED = "adopted"  # confirmed a start that a task killed in its grace left ``starting``
    RESIZED = "resized"


@dataclass(frozen=True)
class LaunchOutcome:
    """What :meth:`LaunchLifecycle.launch` did and the job; ``previous_nodes`` is the size of
    the confirmed launch it replaced or attached to (None when there was none)."""

    action: LaunchAction
    snapshot: JobSnapshot
    previous_nodes: int | None = None


def unfinished(part: PartRecord, ranks: Iterable[int]) -> list[int]:
    """The ranks that did not finish successfully (iroh-tinker writes ``done_<rank>``)."""
    return [rank for rank in ranks if not (Path(part.job_dir) / f"done_{rank}").exists()]


def ranks_down(part: PartRecord) -> list[int]:
    """Ranks iroh-tinker reports down (``down ranks: [..]``), less those that finished."""
    return unfinished(part, listed_down_ranks(part.last_error))


class LaunchLifecycle:
    """The lifecycle half of the hook (module docstring); the hook provides the rest."""

    _cancelled = False
    _in_progress: JobManifest | None = None
    _launcher: subprocess.Popen | None = None

    if TYPE_CHECKING:  # provided by ElasticGridHook

        @property
        def log(self) -> Logger: ...
        @property
        def jobs_root(self) -> Path: ...
        @property
        def job_manager(self) -> JobManager: ...
        def job_folder(self, job_name: str) -> Path: ...
        def job_lock(
            self, job_name: str, *, timeout: float | None = None
        ) -> AbstractContextManager[bool]: ...
        def read_manifest(self, job_name: str) -> JobManifest | None: ...
        def job_snapshot(self, job_name: str) -> JobSnapshot | None: ...
        def prepare_launch(
            self, job_name: str, placement: Placement, options: LaunchOptions
        ) -> PreparedLaunch: ...
        def failure_report(self, snapshot: JobSnapshot, tail: int = 20) -> str: ...
        def lost_parts(
            self, snapshot: JobSnapshot, tail: int = 20, *, confirmed_only: bool = True
        ) -> tuple[LostPart, ...]: ...

    def launch(
        self,
        job_name: str,
        placement: Placement,
        options: LaunchOptions,
        *,
        startup_grace_s: float = DEFAULT_STARTUP_GRACE_S,
    ) -> LaunchOutcome:
        """Run ``placement`` as the job: attach, adopt, or launch/resize, never two copies.

        Attach (start nothing) when the last launch was confirmed, every part runs, and the
        placement and the ``run``/``envs``/``setup`` fingerprints are unchanged; adopt (confirm
        it, start nothing) a launch on the same terms left ``starting`` by a task that died, once
        every part started and every rank is alive. Otherwise (the log says why): 1. prepare and
        check the parts (nothing written on failure); 2. write the new launch's files, its
        manifest as the intent (a failed write stops nothing); 3. record the old launch
        ``stopping``, stop it and its unrecorded processes; 4. put the new launch's manifest
        (``starting``) in place, start its parts; 5. after ``startup_grace_s``, confirm every
        rank is up; if not, stop them, record the job ``down`` (``lost`` when capacity was
        taken away), raise :class:`JobLaunchError`.
        """
        startup_grace_s = check_number("startup_grace_s", startup_grace_s)
        launch = self.prepare_launch(job_name, placement, options)
        self.log.info("Waiting for the lock of job %s.", job_name)
        with self.job_lock(job_name):
            if self._cancelled:
                raise JobLaunchError(
                    f"job {job_name!r} was not launched: the task was killed while it waited "
                    "for the job's lock, so nothing was started or stopped"
                )
            current = self.job_snapshot(job_name)
            previous_nodes = None
            if current is not None:
                refusal = self._attach_refusal(current, launch)
                if refusal is None and current.manifest.state == LaunchPhase.STARTING:
                    return self._adopt(current.manifest, startup_grace_s)
                if refusal is None:
                    return LaunchOutcome(LaunchAction.ATTACHED, current, current.nodes)
                self.log.info("Not attaching to job %s: %s; relaunching it.", job_name, refusal)
                running = any(part.status == JobStatus.RUNNING for part in current.parts)
                if current.manifest.state == LaunchPhase.RUNNING and running:
                    previous_nodes = current.nodes
            manifest, intent = self._write_launch(launch, current)
            if current is not None:
                replaced = f"being replaced by launch {launch.launch_id}"
                self._stop_recorded(current.manifest, replaced)
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
            if part.status != JobStatus.RUNNING
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
        return self._unconfirmed(current) if manifest.state == LaunchPhase.STARTING else None

    def _unconfirmed(self, current: JobSnapshot) -> str | None:
        """Why a launch left ``starting`` cannot be adopted (None: every part started, every
        recorded rank is a live process of that launch, none down or restarted)."""
        manifest = current.manifest
        job, launch_id = manifest.job_name, manifest.launch_id
        started = read_result(self.job_folder(job) / "specs" / launch_id).get("started", [])
        missing = [part.name for part in manifest.parts if part.name not in started]
        if missing:
            return f"its launch {launch_id} was cut short before {', '.join(missing)} started"
        alive = set(launch_processes(job, [launch_id]))
        for part in current.parts:
            pids = self.job_manager.status(part.name).pids
            gone = sorted(int(rank) for rank, pid in pids.items() if int(pid) not in alive)
            restarted = list(Path(part.job_dir).glob("attempt_*")) if part.job_dir else []
            if not pids or gone or ranks_down(part) or restarted:
                return (
                    f"its launch {launch_id} was cut short while starting and part {part.name} "
                    f"is not whole (rank(s) down: {gone or ranks_down(part) or 'restarted'})"
                )
        return None

    def _adopt(self, manifest: JobManifest, grace_s: float) -> LaunchOutcome:
        """Confirm a launch a killed task left ``starting`` once its ranks were up for
        ``grace_s`` since it was recorded; the launch is then this task's own."""
        self.log.info(
            "Job %s's launch %s was left starting by a task that ended, with every part started "
            "and every rank up; confirming it instead of starting it again.",
            manifest.job_name,
            manifest.launch_id,
        )
        self._in_progress = manifest
        recorded = datetime.fromisoformat(manifest.launched_at).timestamp()
        remaining = max(0.0, recorded + grace_s - time.time())
        snapshot = self._confirm_launch(manifest, remaining, grace_s)
        return LaunchOutcome(LaunchAction.ADOPTED, snapshot, snapshot.nodes)

    def _write_launch(
        self, launch: PreparedLaunch, current: JobSnapshot | None
    ) -> tuple[JobManifest, Path]:
        """Step 2: every file of the launch, its manifest as the intent (launch_files.py)."""
        folder = self.job_folder(launch.job_name)
        rendezvous = launch.options.rendezvous or ""
        local_dir = parse_rendezvous(rendezvous).local_dir if rendezvous else None
        if not launch.on_worker:
            local_dir = None  # a folder on the hosts: the ranks make it
        spec_folder = folder / "specs" / launch.launch_id
        paths = {part.part_name: spec_folder / f"{part.part_name}.json" for part in launch.parts}
        records = tuple(
            PartRecord(
                name=part.part_name,
                provider=part.provider.name,
                engine_target=part.provider.engine_target,
                nodes=part.nodes,
                rank_offset=part.rank_offset,
                spec_path=str(paths[part.part_name]),
            )
            for part in launch.parts
        )
        manifest = JobManifest(
            job_name=launch.job_name,
            launch_id=launch.launch_id,
            launched_at=utc_iso_now(),
            placement=launch.placement,
            world_size=launch.parts[0].world_size,
            procs_per_node=launch.options.procs_per_node,
            rendezvous=rendezvous,
            run=launch.options.run,
            parts=records,
            state=LaunchPhase.STARTING,
            fingerprint_salt=launch.fingerprint_salt,
            fingerprints=launch.fingerprints(launch.fingerprint_salt),
        )
        request = {
            "parent_pid": os.getpid(),
            "jobs_root": str(self.jobs_root),
            "parts": [{"name": part.name, "spec_path": part.spec_path} for part in records],
        }

        def write_specs() -> None:
            for part in launch.parts:
                with writing(paths[part.part_name]):
                    part.write_spec(paths[part.part_name])

        part_folders = [self.jobs_root / record.name for record in records]
        try:
            intent = write_launch_files(
                manifest, spec_folder, write_specs, request, part_folders, local_dir
            )
        except JobLaunchError as exc:
            running = current is not None and current.status == JobStatus.RUNNING
            kept = "the running job was left as it was" if running else "nothing was started"
            raise JobLaunchError(
                f"job {launch.job_name!r} was not launched: {exc}; {kept}"
            ) from None
        return manifest, intent

    def _record(
        self, manifest: JobManifest, phase: LaunchPhase, reason: str | None = None
    ) -> JobManifest:
        """Write ``manifest`` in ``phase`` (with ``reason`` as its ``down_reason``)."""
        recorded = replace(manifest, state=phase, down_reason=reason or manifest.down_reason)
        write_json(self.job_folder(manifest.job_name) / MANIFEST_NAME, recorded.to_dict())
        return recorded

    def _stop_recorded(self, manifest: JobManifest, reason: str) -> JobManifest:
        """Record ``manifest``'s launch ``stopping`` (a failed write stops nothing), stop it."""
        try:
            stopping = self._record(manifest, LaunchPhase.STOPPING, reason)
        except JobLaunchError as exc:
            raise JobLaunchError(
                f"job {manifest.job_name!r} was not relaunched: {exc}; nothing was stopped "
                "or started"
            ) from None
        self._stop_launch(stopping)
        return stopping

    def _start_launch(self, manifest: JobManifest, intent: Path) -> JobManifest:
        """Step 4: put the intent in place as the job's manifest, start the parts."""
        target = self.job_folder(manifest.job_name) / MANIFEST_NAME
        with writing(target):
            intent.replace(target)
        self._in_progress = manifest
        spec_folder = intent.parent
        try:
            for record in manifest.parts:
                prepare_part_folder(self.jobs_root, record.name)
            failure = self._run_launcher(manifest, spec_folder)
        finally:
            for record in manifest.parts:  # the launcher redacts too, unless it was killed first
                redact_part_specs(self.jobs_root, record.name, record.spec_path)
        if failure is not None:
            stopped, untracked = self.give_up(manifest, failure)
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
        env = {**os.environ, ENV_JOB: manifest.job_name, ENV_LAUNCH_ID: manifest.launch_id}
        if self._cancelled:
            return CANCELLED
        self._launcher = start_launcher(spec_folder, env)
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
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and not self._cancelled:
            time.sleep(0.1)
        snapshot = self.job_snapshot(manifest.job_name)
        assert snapshot is not None  # the manifest was written by this launch
        problems = [CANCELLED] if self._cancelled else []
        losses = {lost.part: lost for lost in self.lost_parts(snapshot, confirmed_only=False)}
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
            self._record(manifest, LaunchPhase.RUNNING)
            self._in_progress = None
            confirmed = self.job_snapshot(manifest.job_name)
            assert confirmed is not None
            return confirmed
        report = self.failure_report(snapshot)
        if report:
            self.log.error("Job %s did not start:\n%s", manifest.job_name, report)
        grace = wait_s if grace_s is None else grace_s
        what = "; ".join([*lost, *problems])
        reason = f"its ranks were not all up {grace:g} s after the start ({what})"
        # only capacity taken away (a notice says so): the next scale check may recover it
        taken = all(is_capacity_loss(loss.cause) for loss in losses.values())
        phase = LaunchPhase.LOST if losses and taken and not problems else LaunchPhase.DOWN
        self.give_up(manifest, reason, phase)
        raise JobLaunchError(f"job {manifest.job_name!r} is down: {reason}.")

    def give_up(
        self, manifest: JobManifest, reason: str, phase: LaunchPhase = LaunchPhase.DOWN
    ) -> tuple[list[str], list[int]]:
        """Under the job's lock: record a launch that cannot go on ``stopping``, stop it
        (:meth:`_stop_launch`), record it ``phase`` (``down``, or ``lost``) with ``reason``."""
        try:
            manifest = self._record(manifest, LaunchPhase.STOPPING, reason)
        except JobLaunchError as exc:  # stop it all the same: a dead launch must not run on
            self.log.warning("Stopping job %s unrecorded: %s", manifest.job_name, exc)
        stopped = self._stop_launch(manifest)
        self._record(manifest, phase, reason)
        self._in_progress = None
        return stopped

    def _stop_launch(self, manifest: JobManifest) -> tuple[list[str], list[int]]:
        """Stop a launch: launcher, recorded parts, other pids; returns (parts, unrecorded pids)."""
        job, launch_ids = manifest.job_name, [manifest.launch_id]
        terminate([pid for pid in launch_processes(job, launch_ids) if is_launcher(pid)], 0.0)
        stopped = self._stop_parts(job, manifest.parts, manifest.launch_id)
        untracked = terminate(launch_processes(job, launch_ids))
        remote = sweep_remote_launch(job, manifest.launch_id, self._launch_specs(manifest))
        if untracked or remote:
            self.log.info(
                "Stopped %d process(es) of launch %s that iroh-tinker had not recorded: %s",
                len(untracked) + len(remote),
                manifest.launch_id,
                ", ".join([*map(str, untracked), *remote]),
            )
        return stopped, untracked

    def _spec_files(self, job_name: str, launch_id: str) -> list[str]:
        """The part specs a launch wrote (kept in its spec folder, envs redacted)."""
        folder = self.job_folder(job_name) / "specs" / launch_id
        return sorted(str(path) for path in folder.glob("*.json") if not path.name.startswith("."))

    def _launch_specs(self, manifest: JobManifest) -> list[str]:
        """The spec files of a recorded launch: its parts', or its spec folder's."""
        recorded = [part.spec_path for part in manifest.parts if part.spec_path]
        return recorded or self._spec_files(manifest.job_name, manifest.launch_id)

    def cancel_launch(self) -> bool:
        """``on_kill``: stop the launch this hook runs; False when there is none (waiting for the
        lock, or attached): nothing is stopped, and a launch that gets the lock starts nothing."""
        self._cancelled = True
        manifest = self._in_progress
        if manifest is None:
            return False
        launcher = self._launcher
        if launcher is not None and launcher.poll() is None:
            with suppress(OSError):
                os.killpg(launcher.pid, signal.SIGKILL)
        self._stop_launch(manifest)
        return True

    def stop_launch(self, job_name: str, launch_id: str) -> JobSnapshot | None:
        """Stop the job only if it still runs ``launch_id`` (what a killed task started); a later
        launch (another task's resize) is left alone, told apart by its spec folder."""
        with self.job_lock(job_name, timeout=STOP_LOCK_WAIT_S) as held:
            manifest = self.read_manifest(job_name)
            if manifest is None or manifest.launch_id != launch_id:
                terminate(launch_processes(job_name, [launch_id]))
                sweep_remote_launch(job_name, launch_id, self._spec_files(job_name, launch_id))
                return None
            if held:
                self.give_up(manifest, "stopped: the task that launched it was killed")
            else:
                self._stop_launch(manifest)
            return self.job_snapshot(job_name)

    def _stop_parts(
        self, job_name: str, parts: tuple[PartRecord, ...], launch_id: str | None = None
    ) -> list[str]:
        """Stop the parts that still run; with ``launch_id``, only those that launch started.
        A part's ranks on this machine are stopped first, runner first (launcher.terminate):
        iroh's runner would restart the rank it is asked to stop, whatever ``recovery`` says."""
        stopped = []
        for part in parts:
            try:
                state = self.job_manager.status(part.name)
            except KeyError:  # never started
                continue
            if launch_id is not None and Path(state.spec_path).parent.name != launch_id:
                continue  # the part now runs another launch's spec
            if state.status == "running":
                terminate(own_processes(job_name, state.pids.values()), PART_STOP_GRACE_S)
                self.job_manager.stop(part.name)
                self.log.info("Stopped part %s.", part.name)
                stopped.append(part.name)
        return stopped

    def stop_job(self, job_name: str, reason: str = "stopped on request") -> JobSnapshot | None:
        """Stop every part of the job: recorded ``stopping`` before, ``stopped`` (``reason``)
        after; a launch already down stays so. Returns the job afterwards (None if unknown)."""
        with self.job_lock(job_name):
            manifest = self.read_manifest(job_name)
            if manifest is None:
                return None
            ended = manifest.state.is_terminal
            if not ended:
                manifest = self._record(manifest, LaunchPhase.STOPPING, reason)
            self._stop_launch(manifest)
            self._stop_parts(job_name, manifest.parts)
            if not ended:
                self._record(manifest, LaunchPhase.STOPPED, reason)
            return self.job_snapshot(job_name)
