"""JobStore: a job's folder, its manifest, its lock and its scale state, under the jobs root.

The files (``<job>/manifest.json``, ``<job>/.lock``, ``<job>/specs/<launch_id>/``,
``<job>/rendezvous/<launch_id>/``, one ``<job>--<provider>/`` per part): docs/operators.md
("Files under the jobs root"). The job's lock, an exclusive ``flock`` every worker shares, puts
a launch, a resize, a stop and a scale check of one job one at a time; the manifest is written
atomically and :meth:`JobStore.record` rewrites it in a new launch phase
(:mod:`elasticgrid_provider.core.launch_record`); the scale state is one Airflow Variable, read
and written only here, under the lock (:mod:`elasticgrid_provider.hooks.state_store`: a failed
read is an error, never "no state"; a malformed state is refused, never overwritten).
iroh-tinker's ``JobManager`` (which imports numpy) is built on first use only.
"""

from __future__ import annotations

import fcntl
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from elasticgrid_provider.atomic_files import acquire_lock, write_json
from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.job import JobManifest, JobSnapshot, JobStatus
from elasticgrid_provider.core.launch_record import LaunchPhase
from elasticgrid_provider.core.launch_spec import check_job_name
from elasticgrid_provider.core.state import ScaleState
from elasticgrid_provider.hooks.remote_parts import remote_down_ranks, spec_params
from elasticgrid_provider.hooks.state_store import read_scale_state, write_scale_state

if TYPE_CHECKING:
    from iroh_tinker.cloud import JobManager

MANIFEST_NAME = "manifest.json"
LOCK_NAME = ".lock"


class JobStore:
    """The jobs under one JobManager root: folders, manifests, locks, scale states.

    :param jobs_root: the JobManager root (resolved by the hook).
    :param log: where warnings go (the hook's logger).
    """

    def __init__(self, jobs_root: Path, log: Any) -> None:
        self.jobs_root = jobs_root
        self.log = log

    @cached_property
    def job_manager(self) -> JobManager:
        """iroh-tinker's JobManager on :attr:`jobs_root`, its state files replaced whole
        (hooks/job_manager.py; imported on first use)."""
        from elasticgrid_provider.hooks.job_manager import WholeFileJobManager

        return WholeFileJobManager(root=self.jobs_root)

    def job_folder(self, job_name: str) -> Path:
        """Where the job's manifest, specs, rendezvous and lock live (the name is checked)."""
        return self.jobs_root / check_job_name(job_name)

    def spec_folder(self, job_name: str, launch_id: str) -> Path:
        """Where one launch's specs, launcher request, log and result live."""
        return self.job_folder(job_name) / "specs" / launch_id

    def launch_ids(self, job_name: str) -> list[str]:
        """Every launch of the job that wrote its files here (its spec folders), oldest first."""
        folder = self.job_folder(job_name) / "specs"
        if not folder.is_dir():
            return []
        return sorted(entry.name for entry in folder.iterdir() if entry.is_dir())

    def spec_files(self, job_name: str, launch_id: str) -> list[str]:
        """The part specs a launch wrote (kept in its spec folder, envs redacted)."""
        folder = self.spec_folder(job_name, launch_id)
        return sorted(str(path) for path in folder.glob("*.json") if not path.name.startswith("."))

    def launch_specs(self, manifest: JobManifest) -> list[str]:
        """The spec files of a recorded launch: its parts', or its spec folder's."""
        recorded = [part.spec_path for part in manifest.parts if part.spec_path]
        return recorded or self.spec_files(manifest.job_name, manifest.launch_id)

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
                yield acquire_lock(handle.fileno(), timeout)
            finally:  # a no-op when the wait timed out
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def read_manifest(self, job_name: str) -> JobManifest | None:
        """The job's manifest, or None when it was never launched here."""
        path = self.job_folder(job_name) / MANIFEST_NAME
        if not path.exists():
            return None
        return JobManifest.model_validate(json.loads(path.read_text()))

    def record(
        self, manifest: JobManifest, phase: LaunchPhase, reason: str | None = None
    ) -> JobManifest:
        """Write ``manifest`` in ``phase`` (with ``reason`` as its ``down_reason``)."""
        recorded = replace(manifest, state=phase, down_reason=reason or manifest.down_reason)
        write_json(self.job_folder(manifest.job_name) / MANIFEST_NAME, recorded.model_dump())
        return recorded

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
                parts.append(replace(part, status=JobStatus.STOPPED, last_error="not started"))
                continue
            status = JobStatus.of_part(str(state.status))
            job_dir, error = str(state.job_dir), state.last_error
            ranks_may_be_down = status in (JobStatus.RUNNING, JobStatus.FAILED)
            if ranks_may_be_down and spec_params(part.spec_path) is not None:
                # on SSH hosts iroh-tinker's own words say nothing; the engine's last probe does
                error = remote_down_ranks(job_dir) or (
                    error if status is JobStatus.FAILED else None
                )
            parts.append(replace(part, status=status, job_dir=job_dir, last_error=error))
        return JobSnapshot(manifest=manifest, parts=tuple(parts))

    def read_scale_state(self, job_name: str) -> ScaleState:
        """The job's scale state (hooks/state_store.py): fresh only when its Variable surely
        does not exist and was never written here; StateReadError when that cannot be told
        (a failed read is an error, never "no state"); CorruptStateError if unusable (kept)."""
        return read_scale_state(self.job_folder(job_name), job_name)

    def write_scale_state(self, state: ScaleState) -> None:
        """Write the job's state Variable and record that it exists (the caller holds the
        job's lock)."""
        write_scale_state(self.job_folder(state.job_name), state, self.log)
