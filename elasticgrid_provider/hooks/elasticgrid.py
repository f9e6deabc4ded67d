"""ElasticGridHook: the connection, the grid, and the only door to iroh-tinker.

The hook turns the ``elasticgrid`` connection into a grid of providers and
planner defaults, and runs jobs through iroh-tinker's ``JobManager``. Nothing
is built in ``__init__``: the connection is read, and ``iroh_tinker`` (which
pulls in numpy) is imported, only when a task first needs them, because
Airflow imports DAG files, and so this module, every few seconds.

Files, under the JobManager root (``jobs_root``)::

    <job>/manifest.json              which parts make up the job (JobManifest)
    <job>/.lock                      held while a task launches, stops or checks the job
    <job>/specs/<launch_id>/*.json   the parts' launch specs, as iroh-tinker reads them
    <job>/rendezvous/<launch_id>/    a fresh rendezvous per launch (stale rank
                                     addresses from a previous size break the socket mesh)
    <job>--<provider>/               iroh-tinker's own folder for each part

Connections: an explicit ``elasticgrid_conn_id`` that names no connection is
an error (a typo must not quietly plan on another grid or start a second
copy of a job under another jobs root). Only the default id,
``elasticgrid_default``, may be absent: the built-in grid and iroh-tinker's
default jobs root apply, and the log says "built-in grid" only when that grid
is the one used (an inline ``providers`` grid is not).

The scale state of a job is one Airflow Variable, read and written only here
(:meth:`ElasticGridHook.read_scale_state` / :meth:`ElasticGridHook.write_scale_state`),
under the job's lock. A Variable that is empty, not JSON, ``null``, of another
job or otherwise malformed is refused with one sentence and never overwritten.

The lock is an exclusive ``flock`` on a file next to the job's iroh-tinker
state. Every worker that can stop or resize a job must already share that
folder, so the lock needs no extra infrastructure, and it is what makes a
launch, a resize and a scale check of one job happen one at a time.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook, Variable
from airflow.sdk.exceptions import AirflowNotFoundException

from elasticgrid_provider.core.errors import CorruptStateError, ElasticGridError
from elasticgrid_provider.core.job import JobManifest, JobSnapshot, PartRecord
from elasticgrid_provider.core.launch_spec import (
    LaunchOptions,
    LaunchPart,
    build_launch_parts,
    check_job_name,
)
from elasticgrid_provider.core.placement import Placement
from elasticgrid_provider.core.planner import PREFER_CHOICES, GridPlanner
from elasticgrid_provider.core.providers import DEFAULT_PROVIDERS, Provider, providers_from_dicts
from elasticgrid_provider.core.state import ScaleState, state_variable_key
from elasticgrid_provider.core.step_log import cut_report
from elasticgrid_provider.core.validation import check_choice, check_number, number_from_text

if TYPE_CHECKING:
    from iroh_tinker.cloud import JobManager

MANIFEST_NAME = "manifest.json"
LOCK_NAME = ".lock"


class JobLaunchError(RuntimeError):
    """A part could not be launched; the parts already started were stopped."""


@dataclass(frozen=True)
class GridSettings:
    """What the connection configures: the grid and the planner defaults."""

    providers: tuple[Provider, ...]
    max_spot_fraction: float
    prefer: str
    source: str


@dataclass(frozen=True)
class PreparedLaunch:
    """A launch rendered and validated, not yet started: its id, options and parts."""

    job_name: str
    launch_id: str
    placement: Placement
    options: LaunchOptions
    parts: tuple[LaunchPart, ...]


@dataclass(frozen=True)
class LaunchOutcome:
    """What :meth:`ElasticGridHook.launch` did (launched, attached or resized) and the job."""

    action: str
    snapshot: JobSnapshot
    previous_nodes: int | None = None


def _acquire(descriptor: int, timeout: float | None) -> bool:
    """``flock`` the descriptor exclusively, waiting at most ``timeout`` seconds (None: forever)."""
    if timeout is None:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        return True
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)


def _utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _part_status(state: Any) -> str:
    """iroh-tinker's status word for a part; ``dry-run``/unknown words count as failed."""
    status = str(state.status)
    return status if status in ("running", "done", "failed", "stopped") else "failed"


class ElasticGridHook(BaseHook):
    """Reads the ``elasticgrid`` connection and runs jobs through iroh-tinker's JobManager.

    :param elasticgrid_conn_id: connection with the grid and defaults. An id that
        names no connection is an error, except the default ``elasticgrid_default``:
        without it the built-in default grid applies (and the log says so).
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

    # -- configuration ------------------------------------------------------
    # The connection form (fields and hidden fields) is declared in get_provider_info,
    # the Airflow 3.2+ way; the UI stores each field under its own name in ``extra``.

    @cached_property
    def connection_extra(self) -> dict[str, Any] | None:
        """The connection's extra fields; None when the *default* connection does not exist.

        Raises ElasticGridError when an explicitly named connection does not exist.
        """
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
        extra = self.connection_extra
        conn = self.elasticgrid_conn_id
        if extra is None:
            if self._inline_providers is None:
                self.log.info(
                    "Connection %r does not exist; using the built-in default grid.", conn
                )
            else:
                self.log.info(
                    "Connection %r does not exist; using the task's providers and the default "
                    "planner settings.",
                    conn,
                )
            extra = {}
        grid_source: Any = self._inline_providers
        if grid_source is not None:
            source = field = "the task's providers argument"
        elif extra.get("providers") not in (None, "", []):
            grid_source = extra["providers"]
            source, field = f"connection {conn!r}", f"connection {conn!r} field providers"
        else:
            source = field = "the built-in default grid"
        if isinstance(grid_source, str):  # a form field or a rendered template
            try:
                grid_source = json.loads(grid_source)
            except json.JSONDecodeError as exc:
                raise ElasticGridError(f"{field} is not valid JSON: {exc.msg}") from None
        try:
            providers = (
                DEFAULT_PROVIDERS if grid_source is None else providers_from_dicts(grid_source)
            )
        except ElasticGridError as exc:  # say where the bad grid came from
            raise ElasticGridError(f"{field}: {exc}") from None
        fraction = extra.get("max_spot_fraction")
        prefer = extra.get("prefer") or "cost"
        return GridSettings(
            providers=providers,
            max_spot_fraction=1.0
            if fraction in (None, "")
            else check_number(
                f"connection {conn!r} field max_spot_fraction",
                number_from_text(fraction),
                maximum=1.0,
            ),
            prefer=check_choice(f"connection {conn!r} field prefer", prefer, PREFER_CHOICES),
            source=source,
        )

    def get_planner(
        self, max_spot_fraction: float | None = None, prefer: str | None = None
    ) -> GridPlanner:
        """A planner over the configured grid; arguments override the connection's defaults."""
        settings = self.settings
        return GridPlanner(
            providers=settings.providers,
            max_spot_fraction=settings.max_spot_fraction
            if max_spot_fraction is None
            else max_spot_fraction,
            prefer=settings.prefer if prefer is None else prefer,
        )

    # -- the JobManager ------------------------------------------------------
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
        """Hold the job's exclusive lock; yields False when ``timeout`` seconds pass first.

        ``timeout=None`` waits as long as it takes (launches and stops do);
        a scale check waits a bounded time and holds when the job is busy.
        """
        folder = self.job_folder(job_name)
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / LOCK_NAME, "a+") as handle:
            if not _acquire(handle.fileno(), timeout):
                yield False
                return
            try:
                yield True
            finally:
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
            parts.append(
                replace(
                    part,
                    status=_part_status(state),
                    job_dir=str(state.job_dir),
                    last_error=state.last_error,
                )
            )
        return JobSnapshot(manifest=manifest, parts=tuple(parts))

    # -- lifecycle -----------------------------------------------------------
    def launch(self, job_name: str, placement: Placement, options: LaunchOptions) -> LaunchOutcome:
        """Run ``placement`` as the job: attach, resize or launch, never two copies.

        * every part running at the same placement: attach, start nothing;
        * otherwise any part still running is stopped first (a resize when the job
          ran; the training script resumes from its own checkpoint), then one part
          per provider share is launched.

        The new parts are rendered and validated before anything is stopped or
        written, so a bad input never costs the running job. If a part fails to
        provision, or :meth:`cancel_launch` is called, the parts already started
        are stopped and :class:`JobLaunchError` says why.
        """
        launch = self._prepare_launch(job_name, placement, options)
        with self.job_lock(job_name):
            current = self.job_snapshot(job_name)
            previous_nodes = None
            action = "launched"
            if current is not None:
                running = [part.status == "running" for part in current.parts]
                same = (
                    current.manifest.placement.nodes_by_provider() == placement.nodes_by_provider()
                )
                if running and all(running) and same:
                    return LaunchOutcome("attached", current, current.nodes)
                if any(running):
                    previous_nodes = current.nodes
                    action = "resized"
                self._stop_parts(current.manifest.parts)
            snapshot = self._start_parts(launch)
            return LaunchOutcome(action, snapshot, previous_nodes)

    def _prepare_launch(
        self, job_name: str, placement: Placement, options: LaunchOptions
    ) -> PreparedLaunch:
        """Render and validate the parts of a new launch; nothing is written yet."""
        launch_id = time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]
        folder = self.job_folder(job_name)
        if options.rendezvous is None:
            options = replace(options, rendezvous=f"dir:{folder / 'rendezvous' / launch_id}")
        if options.shared_dir is None:
            options = replace(options, shared_dir=str(folder / "shared"))
        parts = build_launch_parts(placement, job_name, options)
        return PreparedLaunch(job_name, launch_id, placement, options, parts)

    def _start_parts(self, launch: PreparedLaunch) -> JobSnapshot:
        folder = self.job_folder(launch.job_name)
        rendezvous = launch.options.rendezvous or ""
        if rendezvous.startswith("dir:"):
            Path(rendezvous[len("dir:") :]).mkdir(parents=True, exist_ok=True)
        spec_folder = folder / "specs" / launch.launch_id
        spec_folder.mkdir(parents=True, exist_ok=True)
        records = tuple(self._write_part_spec(part, spec_folder) for part in launch.parts)
        manifest = JobManifest(
            job_name=launch.job_name,
            launch_id=launch.launch_id,
            launched_at=_utc_now(),
            placement=launch.placement,
            world_size=launch.parts[0].world_size,
            procs_per_node=launch.options.procs_per_node,
            rendezvous=rendezvous,
            run=launch.options.run,
            parts=records,
        )
        # Written before any part starts: a retry after a crash finds the parts it must own.
        self._write_manifest(manifest)
        self._cancelled = False
        started: list[PartRecord] = []
        for record in records:
            failure = None
            if self._cancelled:
                failure = "the launch was cancelled (the task was killed)"
            else:
                self._clear_markers(record.name)
                try:
                    self.job_manager.launch(record.spec_path)
                except Exception as exc:
                    failure = f"provider {record.provider!r} (part {record.name}) failed: {exc}"
            if failure is not None:
                self._stop_parts(started)
                stopped = ", ".join(part.name for part in started) or "none"
                raise JobLaunchError(
                    f"job {launch.job_name!r} could not start: {failure}; "
                    f"stopped the parts already started: {stopped}"
                )
            started.append(record)
        snapshot = self.job_snapshot(launch.job_name)
        assert snapshot is not None  # the manifest was just written
        return snapshot

    def cancel_launch(self, job_name: str) -> None:
        """Stop a launch in progress: called from ``on_kill``, possibly while it holds the lock.

        The launch loop starts no further part, and the parts that already run
        are stopped now, without the lock, before the supervisor's SIGKILL can
        leave them orphaned.
        """
        self._cancelled = True
        manifest = self.read_manifest(job_name)
        if manifest is not None:
            self._stop_parts(manifest.parts)

    def _clear_markers(self, part_name: str) -> None:
        """Remove a previous launch's ``done_*``/``attempt_*`` markers from the part's folder.

        iroh-tinker reuses a job's folder and never clears them, so a stale
        ``done_0`` would make a failed relaunch look done, and stale attempt
        counters would eat the new launch's restart budget.
        """
        part_folder = self.jobs_root / part_name
        for pattern in ("done_*", "attempt_*"):
            for marker in part_folder.glob(pattern):
                marker.unlink(missing_ok=True)

    @staticmethod
    def _write_part_spec(part: LaunchPart, spec_folder: Path) -> PartRecord:
        path = part.write_spec(spec_folder / f"{part.part_name}.json")
        return PartRecord(
            name=part.part_name,
            provider=part.provider.name,
            engine_target=part.provider.engine_target,
            nodes=part.nodes,
            rank_offset=part.rank_offset,
            spec_path=str(path),
        )

    def _stop_parts(self, parts: tuple[PartRecord, ...] | list[PartRecord]) -> None:
        """Stop the parts that still run (a finished or failed part keeps its status)."""
        for part in parts:
            try:
                running = self.job_manager.status(part.name).status == "running"
            except KeyError:  # never started
                continue
            if running:
                self.job_manager.stop(part.name)
                self.log.info("Stopped part %s.", part.name)

    def stop_job(self, job_name: str) -> JobSnapshot | None:
        """Stop every part of the job; returns the job as it is afterwards (None if unknown)."""
        with self.job_lock(job_name):
            manifest = self.read_manifest(job_name)
            if manifest is None:
                return None
            self._stop_parts(manifest.parts)
            return self.job_snapshot(job_name)

    def failure_report(self, snapshot: JobSnapshot, tail: int = 20) -> str:
        """For each failed part, the tail of the log of each rank that did not finish."""
        lines = []
        for part in snapshot.parts:
            if part.status != "failed":
                continue
            failing_ranks = [
                rank
                for rank in range(part.nodes * snapshot.manifest.procs_per_node)
                if not (Path(part.job_dir) / f"done_{rank}").exists()
            ] or [0]
            for rank in failing_ranks:
                try:
                    log_tail = self.job_manager.logs(part.name, rank=rank, tail=tail)
                except KeyError:
                    log_tail = ""
                lines.append(
                    f"part {part.name} rank {rank} failed ({part.last_error or 'no error recorded'}); "
                    f"last {tail} log lines:\n{log_tail}"
                )
        return "\n".join(lines)

    def step_logs(self, snapshot: JobSnapshot) -> list[Path]:
        """The step-log files the job's reporter writes, one per part folder."""
        from elasticgrid_provider.runtime import STEP_LOG_NAME

        return [Path(part.job_dir) / STEP_LOG_NAME for part in snapshot.parts if part.job_dir]

    # -- the scale state -----------------------------------------------------------
    def read_scale_state(self, job_name: str) -> ScaleState:
        """The job's scale state from its Variable; a fresh state when there is none yet.

        Raises CorruptStateError, naming the Variable and what is wrong, when the
        Variable exists but is empty, not JSON, ``null``, malformed or another
        job's; the Variable is left as it is.
        """
        key = state_variable_key(job_name)
        text = Variable.get(key, default=None)
        if text is None:
            return ScaleState(job_name=job_name)
        try:
            if not str(text).strip():
                raise ElasticGridError("it is empty")
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ElasticGridError(f"it is not valid JSON ({exc})") from None
            if data is None:
                raise ElasticGridError("it holds null instead of a state object")
            return ScaleState.from_dict(data, job_name=job_name)
        except ElasticGridError as exc:
            raise CorruptStateError(
                f"scale state Variable {key!r} cannot be used: {cut_report(str(exc))}; fix or "
                "delete it (the check leaves it unchanged)"
            ) from None

    def write_scale_state(self, state: ScaleState) -> None:
        """Write the job's state Variable (the caller holds the job's lock)."""
        Variable.set(
            state_variable_key(state.job_name),
            state.to_dict(),
            description=f"elasticgrid scale state of job {state.job_name}",
            serialize_json=True,
        )
