"""ElasticGridHook: the connection, the grid, and the provider's one door to the outside.

The hook turns the ``elasticgrid`` connection into a grid of providers and
planner defaults, and does all the provider's I/O: Variables (the scale state,
deadline intervals, the UI's listing), files (manifests, step logs), locks and
iroh-tinker's ``JobManager``. The sensor's decisions are pure
(:mod:`elasticgrid_provider.core.check`). Nothing is built in ``__init__``:
Airflow imports this module every few seconds, so the connection is read, and
``iroh_tinker`` (numpy) imported, only when a task first needs them.

Files, under the JobManager root (``jobs_root``)::

    <job>/manifest.json             which parts make up the job (JobManifest)
    <job>/.lock                     held while a task launches, stops or checks the job
    <job>/specs/<launch_id>/        the parts' launch specs (0600 in 0700 folders; envs values
                                    ``***`` once started), the launcher's log and result
    <job>/rendezvous/<launch_id>/   a fresh rendezvous per launch (stale rank addresses
                                    from a previous size break the socket mesh)
    <job>--<provider>/              iroh-tinker's folder for each part (0700, spec redacted)

Only the default connection ``elasticgrid_default`` may be absent (the built-in
grid and iroh-tinker's default jobs root apply, and the log says so); an explicit
``elasticgrid_conn_id`` naming none is an error, lest a typo plan on another grid
or start a second copy under another jobs root.

A job's scale state is one Airflow Variable, read and written only here, under
the job's lock: an exclusive ``flock`` on a file next to the job's iroh-tinker
state, which every worker that can stop or resize the job shares, so a launch, a
resize and a scale check of one job happen one at a time. A state Variable that
is empty, not JSON, ``null``, another job's or otherwise malformed is refused
with one sentence and never overwritten. A failed read of the state is an error,
never "no state" (:mod:`elasticgrid_provider.hooks.state_store`): the check fails
with one sentence and writes nothing. A jobs folder that cannot be written fails
with one sentence naming it, before anything is done.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from elasticgrid_provider.core.clock import utc_iso_now
from elasticgrid_provider.core.errors import (  # JobLaunchError: re-exported, raised here
    ElasticGridError,
    JobLaunchError,
    RemoteHostError,
)
from elasticgrid_provider.core.job import JobManifest, JobSnapshot, JobStatus, PartRecord
from elasticgrid_provider.core.launch_record import (
    LAUNCH_DOWN,
    LAUNCH_RUNNING,
    LAUNCH_STARTING,
    changed_fields,
    launch_fingerprints,
    new_launch_id,
    new_salt,
)
from elasticgrid_provider.core.launch_spec import (
    LaunchOptions,
    LaunchPart,
    build_launch_parts,
    check_job_name,
    shared_home,
)
from elasticgrid_provider.core.placement import Placement
from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.providers import Provider
from elasticgrid_provider.core.rank_environment import ENV_JOB, ENV_LAUNCH_ID
from elasticgrid_provider.core.recovery import LostPart, loss_cause, part_is_lost
from elasticgrid_provider.core.rendezvous import parse_rendezvous
from elasticgrid_provider.core.settings import GridSettings, grid_settings
from elasticgrid_provider.core.state import ScaleState, state_variable_key
from elasticgrid_provider.core.step_log import StepLogChunk, read_step_log
from elasticgrid_provider.core.validation import Choice, check_number
from elasticgrid_provider.hooks.launcher import (
    is_launcher,
    launch_processes,
    log_tail,
    prepare_part_folder,
    private_folder,
    read_result,
    redact_part_specs,
    start_launcher,
    terminate,
)
from elasticgrid_provider.hooks.remote_parts import (
    is_ssh_target,
    pull_step_log,
    ranks_down,
    remote_down_ranks,
    spec_params,
    sweep_remote_launch,
)
from elasticgrid_provider.hooks.state_store import (
    read_scale_state,
    read_variable,
    write_scale_state,
)

if TYPE_CHECKING:
    from iroh_tinker.cloud import JobManager

MANIFEST_NAME = "manifest.json"
LOCK_NAME = ".lock"
DEFAULT_STARTUP_GRACE_S = 3.0
"""How long a new launch's ranks must stay up before the launch counts as started."""
STOP_LOCK_WAIT_S = 2.0
"""How long a killed task waits for the job's lock before it stops its own launch anyway
(Airflow SIGKILLs 5 s after SIGTERM); only that launch's parts and processes are touched."""
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
    """What a launch did: started the job, attached to the running one, or resized it."""

    LAUNCHED = "launched"
    ATTACHED = "attached"
    RESIZED = "resized"


@dataclass(frozen=True)
class LaunchOutcome:
    """What :meth:`ElasticGridHook.launch` did (launched, attached or resized) and the job."""

    action: LaunchAction
    snapshot: JobSnapshot
    previous_nodes: int | None = None


def _acquire(descriptor: int, timeout: float | None) -> bool:
    """``flock`` the descriptor exclusively, waiting at most ``timeout`` seconds (None: forever)."""
    if timeout is None:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        return True
    deadline = time.monotonic() + timeout
    while True:
        with suppress(BlockingIOError):
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def _unfinished(part: PartRecord, ranks: Iterable[int]) -> list[int]:
    """The ranks that did not finish successfully (iroh-tinker writes ``done_<rank>``)."""
    return [rank for rank in ranks if not (Path(part.job_dir) / f"done_{rank}").exists()]


def _ranks_down(part: PartRecord) -> list[int]:
    """Ranks iroh-tinker reports down (``down ranks: [..]``), less those that finished."""
    return _unfinished(part, ranks_down(part.last_error))


class ElasticGridHook(BaseHook):
    """Reads the ``elasticgrid`` connection and runs jobs through iroh-tinker's JobManager.

    :param elasticgrid_conn_id: the connection with the grid and defaults (module docstring).
    :param providers: an inline grid (list of provider dicts) that overrides the connection's.
    :param jobs_root: the JobManager root; overrides the connection's ``jobs_root``.
    """

    conn_name_attr = "elasticgrid_conn_id"
    default_conn_name = "elasticgrid_default"
    conn_type = "elasticgrid"
    hook_name = "ElasticGrid"

    def __init__(
        self,
        elasticgrid_conn_id: str = default_conn_name,
        providers: list[dict[str, Any]] | None = None,
        jobs_root: str | None = None,
    ) -> None:
        super().__init__()
        self.elasticgrid_conn_id = elasticgrid_conn_id
        self._inline_providers = providers
        self._jobs_root = jobs_root
        self._cancelled = False
        self._in_progress: JobManifest | None = None
        self._launcher: subprocess.Popen | None = None

    # -- configuration (the connection form is declared in get_provider_info) --------

    @cached_property
    def connection_extra(self) -> dict[str, Any] | None:
        """The connection's extra fields; None when the *default* connection does not exist."""
        try:
            connection = self.get_connection(self.elasticgrid_conn_id)
        except AirflowNotFoundException:
            if self.elasticgrid_conn_id != self.default_conn_name:
                raise ElasticGridError(
                    f"elasticgrid_conn_id {self.elasticgrid_conn_id!r} names a connection that "
                    f"does not exist; create it, or leave elasticgrid_conn_id unset to use "
                    f"{self.default_conn_name!r} or the built-in grid"
                ) from None
            return None
        extra = connection.extra_dejson
        return extra if isinstance(extra, dict) else {}

    @cached_property
    def settings(self) -> GridSettings:
        """The grid and defaults, from the inline grid, the connection or the built-in default."""
        extra, inline = self.connection_extra, self._inline_providers
        if extra is None:
            self.log.info(
                "Connection %r does not exist; using %s.",
                self.elasticgrid_conn_id,
                "the built-in default grid"
                if inline is None
                else "the task's providers and the default planner settings",
            )
        return grid_settings(extra, self.elasticgrid_conn_id, inline)

    def get_planner(
        self, max_spot_fraction: float | None = None, prefer: str | None = None
    ) -> GridPlanner:
        """A planner over the configured grid; arguments override the connection's defaults."""
        settings = self.settings
        spot = settings.max_spot_fraction if max_spot_fraction is None else max_spot_fraction
        prefer = settings.prefer if prefer is None else prefer
        return GridPlanner(providers=settings.providers, max_spot_fraction=spot, prefer=prefer)

    @cached_property
    def jobs_root(self) -> Path:
        """The JobManager root: explicit, from the connection, or iroh-tinker's default."""
        configured = self._jobs_root or (self.connection_extra or {}).get("jobs_root")
        if configured:
            return Path(configured).expanduser().resolve()
        from iroh_tinker.cloud import default_root

        return default_root()

    @cached_property
    def job_manager(self) -> JobManager:
        """iroh-tinker's JobManager on :attr:`jobs_root` (imported on first use)."""
        from iroh_tinker.cloud import JobManager

        return JobManager(root=self.jobs_root)

    def job_folder(self, job_name: str) -> Path:
        """Where the job's manifest, specs, rendezvous and lock live (the name is checked)."""
        return self.jobs_root / check_job_name(job_name)

    @contextmanager
    def job_lock(self, job_name: str, *, timeout: float | None = None) -> Iterator[bool]:
        """Hold the job's lock; yields False if ``timeout`` seconds (None: no limit) pass first."""
        folder = self.job_folder(job_name)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            handle = open(folder / LOCK_NAME, "a+")  # noqa: SIM115 - closed below
        except OSError as exc:  # a read-only or unwritable jobs folder: nothing was done
            raise ElasticGridError(
                f"jobs folder {folder} cannot be written ({exc.strerror or exc}), so job "
                f"{job_name!r} cannot be locked and nothing was changed: give the jobs root "
                f"{self.jobs_root} write access on this worker"
            ) from None
        with handle:
            try:
                yield _acquire(handle.fileno(), timeout)
            finally:  # a no-op when the wait timed out
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def read_manifest(self, job_name: str) -> JobManifest | None:
        """The job's manifest, or None when it was never launched here."""
        path = self.job_folder(job_name) / MANIFEST_NAME
        if not path.exists():
            return None
        return JobManifest.from_dict(json.loads(path.read_text()))

    def _write_manifest(self, manifest: JobManifest) -> None:
        folder = self.job_folder(manifest.job_name)
        folder.mkdir(parents=True, exist_ok=True)
        temporary = folder / f".{MANIFEST_NAME}.{os.getpid()}.tmp"
        temporary.write_text(json.dumps(manifest.to_dict(), indent=2) + "\n")
        temporary.replace(folder / MANIFEST_NAME)

    def job_snapshot(self, job_name: str) -> JobSnapshot | None:
        """The job's manifest with each part's live status, or None when there is no job."""
        manifest = self.read_manifest(job_name)
        if manifest is None:
            return None
        parts = []
        for part in manifest.parts:
            try:
                state = self.job_manager.status(part.name)
            except KeyError:  # never started: its launch failed or was cut short
                parts.append(replace(part, status="stopped", last_error="not started"))
                continue
            status = str(state.status)
            if status not in ("running", "done", "failed", "stopped"):  # dry-run, unknown words
                status = "failed"
            job_dir, error = str(state.job_dir), state.last_error
            if status in ("running", "failed") and spec_params(part.spec_path) is not None:
                # on SSH hosts iroh-tinker's own words say nothing; the engine's last probe does
                error = remote_down_ranks(job_dir) or (error if status == "failed" else None)
            parts.append(replace(part, status=status, job_dir=job_dir, last_error=error))
        return JobSnapshot(manifest=manifest, parts=tuple(parts))

    # -- lifecycle: record intent -> act -> confirm (core/launch_record.py); a launcher
    # child process (hooks/launcher.py) starts the parts, so no rank inherits the task's fds.

    def launch(
        self,
        job_name: str,
        placement: Placement,
        options: LaunchOptions,
        *,
        startup_grace_s: float = DEFAULT_STARTUP_GRACE_S,
    ) -> LaunchOutcome:
        """Run ``placement`` as the job: attach, or launch/resize in five steps, never two copies.

        Attach (start nothing) only when the last launch was confirmed, every part runs, and
        the placement and the ``run``/``envs``/``setup`` fingerprints are unchanged. Otherwise
        (the log says why): 1. prepare and check the parts (nothing written on failure); 2. stop
        the old launch and its unrecorded processes; 3. record the launch ``starting``, start
        its parts; 4. after ``startup_grace_s``, confirm every rank is up; 5. if not, stop
        them, record the job ``down``, raise :class:`JobLaunchError` saying why.
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
                if refusal is None:
                    return LaunchOutcome(LaunchAction.ATTACHED, current, current.nodes)
                self.log.info("Not attaching to job %s: %s; relaunching it.", job_name, refusal)
                if any(part.status == JobStatus.RUNNING for part in current.parts):
                    previous_nodes = current.nodes
                self._stop_launch(current.manifest)
            manifest = self._start_launch(launch)
            snapshot = self._confirm_launch(manifest, startup_grace_s)
            action = LaunchAction.LAUNCHED if previous_nodes is None else LaunchAction.RESIZED
            return LaunchOutcome(action, snapshot, previous_nodes)

    def prepare_launch(
        self, job_name: str, placement: Placement, options: LaunchOptions
    ) -> PreparedLaunch:
        """Step 1 (nothing written or started); any problem is an :class:`ElasticGridError`."""
        launch_id = new_launch_id()
        workdir = Path(options.workdir).expanduser().resolve()  # the ranks start there
        if not workdir.is_dir():
            raise ElasticGridError(
                f"workdir must be a folder on this machine, got {options.workdir!r}"
            )
        options = replace(options, workdir=str(workdir))
        homes = {
            share.provider.name: self._job_home(job_name, share.provider)
            for share in placement.assignments
        }
        world_size = placement.total_nodes * options.procs_per_node
        home = shared_home(homes, world_size, options.rendezvous)
        if options.rendezvous is None and home is not None:
            options = replace(options, rendezvous=f"dir:{home}/rendezvous/{launch_id}")
        if options.shared_dir is None and home is not None:
            options = replace(options, shared_dir=f"{home}/shared")
        options = replace(options, launch_id=launch_id)
        parts = build_launch_parts(placement, job_name, options)
        for part in parts:
            self._check_engine(part, options)
        on_worker = not any(is_ssh_target(part.engine_target) for part in parts)
        return PreparedLaunch(job_name, launch_id, placement, options, parts, new_salt(), on_worker)

    def _job_home(self, job_name: str, provider: Provider) -> str | None:
        """The job's folder as ``provider``'s nodes see it: under the jobs root on this machine,
        under ``params.shared_dir`` on SSH hosts (None when they share none)."""
        if not is_ssh_target(provider.engine_target):
            return str(self.job_folder(job_name))
        shared = provider.params.get("shared_dir")
        return f"{str(shared).rstrip('/')}/{job_name}" if shared else None

    @staticmethod
    def _check_engine(part: LaunchPart, options: LaunchOptions) -> None:
        """Resolve the part's engine; on the local engine, check that the program exists."""
        from iroh_tinker.cloud.engines import create_engine
        from iroh_tinker.cloud.engines.local import LocalEngine

        target = part.engine_target
        try:
            engine = create_engine(target, part.to_launch_spec())
        except Exception as exc:
            raise ElasticGridError(
                f"provider {part.provider.name!r} engine {target!r} cannot be used: {exc}"
            ) from None
        check_hosts = getattr(engine, "check_hosts", None)
        if callable(check_hosts):  # reach every host before anything is stopped or started
            try:
                check_hosts()
            except Exception as exc:
                raise JobLaunchError(
                    f"provider {part.provider.name!r} cannot be used now: {exc}"
                ) from None
        if not isinstance(engine, LocalEngine):
            return  # the program lives on machines this worker cannot see
        try:
            program = shlex.split(options.run)[0]
        except (ValueError, IndexError):
            raise ElasticGridError(
                f"run is not a valid command line, got {options.run!r}"
            ) from None
        search_path = options.envs.get("PATH", os.environ.get("PATH", ""))
        if shutil.which(program, path=search_path) is None:  # a path with a "/" is checked as is
            raise ElasticGridError(
                f"run command's program {program!r} is not an executable on this machine "
                f"(provider {part.provider.name!r}, engine {target!r})"
            )

    def _attach_refusal(self, current: JobSnapshot, launch: PreparedLaunch) -> str | None:
        """Why the running job is not this launch (None: attach to it)."""
        manifest = current.manifest
        if manifest.state != LAUNCH_RUNNING:
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
        return f"its {', '.join(changed)} changed" if changed else None

    def _start_launch(self, launch: PreparedLaunch) -> JobManifest:
        """Step 3: record the launch, then start its parts in the launcher process."""
        folder = self.job_folder(launch.job_name)
        rendezvous = launch.options.rendezvous or ""
        local_dir = parse_rendezvous(rendezvous).local_dir if rendezvous else None
        if local_dir is not None and launch.on_worker:
            Path(local_dir).mkdir(parents=True, exist_ok=True)
        private_folder(folder / "specs")
        spec_folder = private_folder(folder / "specs" / launch.launch_id)
        records = tuple(
            PartRecord(
                name=part.part_name,
                provider=part.provider.name,
                engine_target=part.provider.engine_target,
                nodes=part.nodes,
                rank_offset=part.rank_offset,
                spec_path=str(part.write_spec(spec_folder / f"{part.part_name}.json")),
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
            state=LAUNCH_STARTING,
            fingerprint_salt=launch.fingerprint_salt,
            fingerprints=launch.fingerprints(launch.fingerprint_salt),
        )
        # the intent, written before anything starts: a retry or a kill reconciles from it
        self._write_manifest(manifest)
        self._in_progress = manifest
        try:
            for record in records:
                prepare_part_folder(self.jobs_root, record.name)
            failure = self._run_launcher(manifest, spec_folder)
        finally:
            for record in records:  # the launcher redacts too, unless it was killed first
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
                f"job {launch.job_name!r} could not start: {failure}; stopped the parts "
                f"already started: {', '.join(stopped) or 'none'}{leftovers}"
            )
        return manifest

    def _run_launcher(self, manifest: JobManifest, spec_folder: Path) -> str | None:
        """Start the parts in a launcher process and wait; returns what failed, if anything."""
        request = {
            "parent_pid": os.getpid(),
            "jobs_root": str(self.jobs_root),
            "parts": [{"name": part.name, "spec_path": part.spec_path} for part in manifest.parts],
        }
        env = {**os.environ, ENV_JOB: manifest.job_name, ENV_LAUNCH_ID: manifest.launch_id}
        if self._cancelled:
            return CANCELLED
        self._launcher = start_launcher(request, spec_folder, env)
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

    def _confirm_launch(self, manifest: JobManifest, grace_s: float) -> JobSnapshot:
        """Steps 4-5: after ``grace_s``, every part runs (or is done) with no rank down."""
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and not self._cancelled:
            time.sleep(0.1)
        snapshot = self.job_snapshot(manifest.job_name)
        assert snapshot is not None  # the manifest was written by this launch
        problems = [CANCELLED] if self._cancelled else []
        for part in snapshot.parts:
            attempts = Path(part.job_dir).glob("attempt_*") if part.job_dir else ()
            restarted = sorted(marker.name.split("_", 1)[1] for marker in attempts)
            if part.status not in (JobStatus.RUNNING, JobStatus.DONE):
                detail = f" ({part.last_error})" if part.last_error else ""
                problems.append(f"part {part.name} is {part.status}{detail}")
            elif part.status == JobStatus.RUNNING and (down := _ranks_down(part)):
                problems.append(f"part {part.name} has ranks down: {down}")
            elif restarted:
                problems.append(f"part {part.name} had to restart rank(s) {', '.join(restarted)}")
        if not problems:
            self._write_manifest(replace(manifest, state=LAUNCH_RUNNING))
            self._in_progress = None
            confirmed = self.job_snapshot(manifest.job_name)
            assert confirmed is not None
            return confirmed
        report = self.failure_report(snapshot)
        if report:
            self.log.error("Job %s did not start:\n%s", manifest.job_name, report)
        reason = f"its ranks were not all up {grace_s:g} s after the start ({'; '.join(problems)})"
        self.give_up(manifest, reason)
        raise JobLaunchError(f"job {manifest.job_name!r} is down: {reason}.")

    def give_up(self, manifest: JobManifest, reason: str) -> tuple[list[str], list[int]]:
        """Under the job's lock: :meth:`_stop_launch` a launch that cannot go on, record it down."""
        stopped = self._stop_launch(manifest)
        self._write_manifest(replace(manifest, state=LAUNCH_DOWN, down_reason=reason))
        self._in_progress = None
        return stopped

    def _stop_launch(self, manifest: JobManifest) -> tuple[list[str], list[int]]:
        """Stop a launch: launcher, recorded parts, other pids; returns (parts, unrecorded pids)."""
        job, launch_ids = manifest.job_name, [manifest.launch_id]
        terminate([pid for pid in launch_processes(job, launch_ids) if is_launcher(pid)], 0.0)
        stopped = self._stop_parts(manifest.parts, manifest.launch_id)
        untracked = terminate(launch_processes(job, launch_ids))
        remote = sweep_remote_launch(job, manifest.launch_id, self._launch_specs(manifest))
        if remote:
            self.log.info(
                "Stopped %d process(es) of launch %s on SSH hosts that iroh-tinker had not "
                "recorded: %s",
                len(remote),
                manifest.launch_id,
                ", ".join(remote),
            )
        if untracked:
            self.log.info(
                "Stopped %d process(es) of launch %s that iroh-tinker had not recorded: %s",
                len(untracked),
                manifest.launch_id,
                untracked,
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

    def _stop_parts(self, parts: tuple[PartRecord, ...], launch_id: str | None = None) -> list[str]:
        """Stop the parts that still run; with ``launch_id``, only those that launch started."""
        stopped = []
        for part in parts:
            try:
                state = self.job_manager.status(part.name)
            except KeyError:  # never started
                continue
            if launch_id is not None and Path(state.spec_path).parent.name != launch_id:
                continue  # the part now runs another launch's spec
            if state.status == "running":
                self.job_manager.stop(part.name)
                self.log.info("Stopped part %s.", part.name)
                stopped.append(part.name)
        return stopped

    def stop_job(self, job_name: str) -> JobSnapshot | None:
        """Stop every part of the job; returns the job as it is afterwards (None if unknown)."""
        with self.job_lock(job_name):
            manifest = self.read_manifest(job_name)
            if manifest is None:
                return None
            self._stop_launch(manifest)
            self._stop_parts(manifest.parts)
            return self.job_snapshot(job_name)

    def failure_report(self, snapshot: JobSnapshot, tail: int = 20) -> str:
        """For each lost part (failed, or running with ranks down), the log tail of each rank
        that did not finish."""
        return "\n".join(
            f"part {part.name} rank {rank} failed ({part.last_error or 'no error recorded'}); "
            f"last {tail} log lines:\n{self._rank_log(part.name, rank, tail)}"
            for part in snapshot.parts
            if (lost := self._lost_ranks(part, snapshot.manifest.procs_per_node)) is not None
            for rank in lost or [0]
        )

    @staticmethod
    def _lost_ranks(part: PartRecord, per_node: int) -> list[int] | None:
        """A lost part's ranks that did not finish; None when the part is not lost
        (:func:`~elasticgrid_provider.core.recovery.part_is_lost`)."""
        down = _ranks_down(part) if part.status == JobStatus.RUNNING else []
        if not part_is_lost(part.status, down):
            return None
        return down or _unfinished(part, range(part.nodes * per_node))

    def _rank_log(self, part_name: str, rank: int, tail: int) -> str:
        """The last ``tail`` lines of a rank's log; empty when there is none to read."""
        try:
            return self.job_manager.logs(part_name, rank=rank, tail=tail)
        except (KeyError, OSError):
            return ""

    def lost_parts(self, snapshot: JobSnapshot, tail: int = 20) -> tuple[LostPart, ...]:
        """The parts of a confirmed launch that lost ranks, with the cause (core/recovery.py)."""
        if snapshot.manifest.state != LAUNCH_RUNNING:
            return ()
        lost = []
        for part in snapshot.parts:
            ranks = self._lost_ranks(part, snapshot.manifest.procs_per_node)
            if ranks is None:
                continue
            log_tail = self._rank_log(part.name, ranks[0] if ranks else 0, tail)
            lost.append(
                LostPart(
                    part=part.name,
                    provider=part.provider,
                    nodes=part.nodes,
                    ranks=tuple(ranks),
                    cause=loss_cause(log_tail, part.last_error),
                )
            )
        return tuple(lost)

    def read_step_logs(
        self, snapshot: JobSnapshot, state: ScaleState, tail: int
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
                    self.log.warning("Could not pull the step log of part %s: %s", part.name, exc)
        paths = [Path(part.job_dir) / STEP_LOG_NAME for part in snapshot.parts if part.job_dir]
        cursor = state.log_cursor
        return [read_step_log(p, cursor(str(p)), tail=tail, nodes=snapshot.nodes) for p in paths]

    # -- Variables: static, so deadlines, shared_root and the UI plugin need no hook ---

    @staticmethod
    def read_variable(key: str) -> str | None:
        """A Variable's raw text, or None when it does not exist (from a task); a failed read
        raises StateReadError, never passes for "no Variable" (hooks/state_store.py)."""
        return read_variable(key)

    @staticmethod
    def scale_state_exists(job_name: str) -> bool:
        """Whether the job's state Variable exists, whatever it holds (from a task)."""
        return ElasticGridHook.read_variable(state_variable_key(job_name)) is not None

    @staticmethod
    def stored_scale_states(job_name: str | None = None) -> list[tuple[str, str | None]]:
        """Every job's state Variable (or ``job_name``'s) as (key, raw text) pairs, from the
        metadata DB: the UI plugin runs outside a task, with no ``Variable.get``."""
        from airflow.models.variable import Variable as VariableModel
        from airflow.utils.session import create_session
        from sqlalchemy import select

        query = select(VariableModel)
        if job_name is None:
            prefix = state_variable_key("")
            query = query.where(VariableModel.key.startswith(prefix, autoescape=True))
        else:
            query = query.where(VariableModel.key == state_variable_key(job_name))
        with create_session() as session:
            return [(row.key, row.val) for row in session.scalars(query)]

    def read_scale_state(self, job_name: str) -> ScaleState:
        """The job's scale state (hooks/state_store.py): fresh only when its Variable surely
        does not exist and was never written here; StateReadError when that cannot be told
        (a failed read is an error, never "no state"); CorruptStateError if unusable (kept)."""
        return read_scale_state(self.job_folder(job_name), job_name)

    def write_scale_state(self, state: ScaleState) -> None:
        """Write the job's state Variable and record that it exists (the caller holds the
        job's lock)."""
        write_scale_state(self.job_folder(state.job_name), state, self.log)
