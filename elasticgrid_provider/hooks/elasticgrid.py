"""ElasticGridHook: the connection, the grid, and the provider's one door to the outside.

The hook turns the ``elasticgrid`` connection into a grid of providers and
planner defaults, and does all the provider's I/O: Variables (the scale state,
deadline intervals, the UI's listing), files (manifests, step logs), locks and
iroh-tinker's ``JobManager``; the job lifecycle (launch, attach, adopt,
resize, stop) is :mod:`elasticgrid_provider.hooks.lifecycle`. The sensor's
decisions are pure (:mod:`elasticgrid_provider.core.check`). Nothing is built in ``__init__``:
Airflow imports this module every few seconds, so the connection is read, and
``iroh_tinker`` (numpy) imported, only when a task first needs them.

Files, under the JobManager root (``jobs_root``)::

    <job>/manifest.json             which parts make up the job (JobManifest)
    <job>/.lock                     held while a task launches, stops or checks the job
    <job>/specs/<launch_id>/        the parts' launch specs (0600 in 0700 folders; envs values
                                    ``***`` once started), the launcher's request, log and
                                    result, and the launch's manifest until it is moved in
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
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from elasticgrid_provider.core.errors import (  # JobLaunchError: re-exported, raised here
    ElasticGridError,
    JobLaunchError,
    RemoteHostError,
)
from elasticgrid_provider.core.job import JobManifest, JobSnapshot, JobStatus, PartRecord
from elasticgrid_provider.core.launch_record import new_launch_id, new_salt
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
from elasticgrid_provider.core.recovery import LostPart, loss_cause, part_is_lost
from elasticgrid_provider.core.settings import GridSettings, grid_settings
from elasticgrid_provider.core.state import ScaleState, state_variable_key
from elasticgrid_provider.core.step_log import StepLogChunk, read_step_log
from elasticgrid_provider.hooks.lifecycle import (  # re-exported: the operators import them here
    CANCELLED,
    DEFAULT_STARTUP_GRACE_S,
    MANIFEST_NAME,
    STOP_LOCK_WAIT_S,
    LaunchAction,
    LaunchLifecycle,
    LaunchOutcome,
    PreparedLaunch,
    ranks_down,
    unfinished,
)
from elasticgrid_provider.hooks.remote_parts import (
    is_ssh_target,
    pull_step_log,
    remote_down_ranks,
    spec_params,
)
from elasticgrid_provider.hooks.state_store import (
    read_scale_state,
    read_variable,
    write_scale_state,
)

if TYPE_CHECKING:
    from iroh_tinker.cloud import JobManager

__all__ = [
    "CANCELLED",
    "DEFAULT_STARTUP_GRACE_S",
    "STOP_LOCK_WAIT_S",
    "ElasticGridHook",
    "JobLaunchError",
    "LaunchAction",
    "LaunchOutcome",
    "PreparedLaunch",
]
LOCK_NAME = ".lock"


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


class ElasticGridHook(LaunchLifecycle, BaseHook):
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
        self._in_progress = None
        self._launcher = None

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

    # -- lifecycle (hooks/lifecycle.py): launch, attach, adopt, resize, stop

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

    def failure_report(self, snapshot: JobSnapshot, tail: int = 20) -> str:
        """For each lost part (failed, or running with ranks down), the log tail of each rank
        that did not finish, named by its part rank and its global rank."""
        return "\n".join(
            f"part {part.name} rank {rank} (global rank {part.rank_offset + rank}) failed "
            f"({part.last_error or 'no error recorded'}); last {tail} log lines:\n"
            f"{self._rank_log(part.name, rank, tail)}"
            for part in snapshot.parts
            if (lost := self._lost_ranks(part, snapshot.manifest.procs_per_node)) is not None
            for rank in lost or [0]
        )

    @staticmethod
    def _lost_ranks(part: PartRecord, per_node: int) -> list[int] | None:
        """A lost part's ranks that did not finish; None when the part is not lost
        (:func:`~elasticgrid_provider.core.recovery.part_is_lost`)."""
        down = ranks_down(part) if part.status in (JobStatus.RUNNING, JobStatus.STOPPED) else []
        if part.status == JobStatus.STOPPED:  # stopped after its ranks went down: lost before
            return down or None
        if not part_is_lost(part.status, down):
            return None
        return down or unfinished(part, range(part.nodes * per_node))

    def _rank_log(self, part_name: str, rank: int, tail: int) -> str:
        """The last ``tail`` lines of a rank's log; empty when there is none to read."""
        try:
            return self.job_manager.logs(part_name, rank=rank, tail=tail)
        except (KeyError, OSError):
            return ""

    def lost_parts(
        self, snapshot: JobSnapshot, tail: int = 20, *, confirmed_only: bool = True
    ) -> tuple[LostPart, ...]:
        """The parts that lost ranks, with their global ranks and the cause (core/recovery.py):
        the last cause line of the first lost rank's log, else iroh-tinker's ``down ranks``.
        Only a confirmed launch, or one ``lost`` while starting, loses capacity, unless
        ``confirmed_only`` is False."""
        if confirmed_only and not snapshot.manifest.state.can_lose_capacity:
            return ()
        lost = []
        for part in snapshot.parts:
            ranks = self._lost_ranks(part, snapshot.manifest.procs_per_node)
            if ranks is None:
                continue
            log_tail = self._rank_log(part.name, ranks[0] if ranks else 0, tail)
            notice = part.last_error or f"down ranks: {ranks}"  # iroh-tinker's words, part ranks
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
