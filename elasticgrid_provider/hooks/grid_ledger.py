"""The grid ledger on disk, under the jobs root, changed under one grid-wide lock.

``.grid/ledger.json`` (:mod:`elasticgrid_provider.core.fleet.ledger`) and its ``flock``,
``.grid/.lock``, where every worker and the triggerer see them (``.grid`` can never be a job's
folder). :meth:`GridLedgerStore.transaction` holds the lock, reads the ledger, reconciles it
with the jobs' launch records (:func:`read_launch_records`), yields it and writes what the
caller left atomically, or nothing on an exception; :meth:`GridLedgerStore.snapshot` reads
without the lock for the CLI and the UI. A missing ledger is rebuilt, a corrupt one moved
aside and rebuilt, a newer major one refused and left alone. The rules: docs/fleet-ledger.md
("The ledger").
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from elasticgrid_provider.atomic_files import acquire_lock, write_atomically
from elasticgrid_provider.core.clock import epoch_now
from elasticgrid_provider.core.errors import ElasticGridError, NewerRecordError
from elasticgrid_provider.core.fleet.ledger import (
    GridLedger,
    lapsed_requests,
)
from elasticgrid_provider.core.fleet.reconcile import RESERVATION_GRACE_S, rebuild, reconcile
from elasticgrid_provider.core.job import JobManifest, JobStatus, PartRecord
from elasticgrid_provider.core.launch_record import LaunchPhase
from elasticgrid_provider.core.launch_spec import check_job_name
from elasticgrid_provider.hooks.job_store import MANIFEST_NAME
from elasticgrid_provider.hooks.remote_parts import is_ssh_target

GRID_FOLDER = ".grid"
LEDGER_NAME = "ledger.json"
GRID_LOCK_NAME = ".lock"
PART_STATE_NAME = "job.json"  # iroh-tinker's record of a part
ENDED_REASON = "every part of the launch ended"

log = logging.getLogger(__name__)


@dataclass
class LedgerTransaction:
    """The ledger inside :meth:`GridLedgerStore.transaction`: set :attr:`ledger` to change it."""

    ledger: GridLedger
    now: float
    note: str | None = None  # why the ledger was rebuilt, when it was


@dataclass(frozen=True)
class LedgerView:
    """A read-only ledger for views, with a note when the file was missing or corrupt."""

    ledger: GridLedger
    note: str | None = None


def _process_gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie has: it only waits to be reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def part_ended(jobs_root: Path, part: PartRecord) -> bool:
    """Whether a part of a confirmed launch runs no more: iroh-tinker's record says it ended,
    or, on this machine, every rank process it recorded is gone (docs/fleet-ledger.md)."""
    try:
        state = json.loads((jobs_root / part.name / PART_STATE_NAME).read_text())
    except (OSError, ValueError):
        return False  # no record, or one that cannot be read: cannot tell, it keeps its nodes
    if not isinstance(state, dict):
        return False
    if JobStatus.of_part(str(state.get("status"))).is_terminal:
        return True
    if is_ssh_target(part.engine_target):
        return False
    pids = state.get("pids")
    if not isinstance(pids, dict) or not pids:
        return False
    try:
        return all(_process_gone(int(pid)) for pid in pids.values())
    except (TypeError, ValueError):
        return False


def launch_ended(jobs_root: Path, manifest: JobManifest) -> bool:
    """Whether a confirmed launch's parts all ended, observed or not (docs/fleet-ledger.md)."""
    return (
        manifest.state is LaunchPhase.RUNNING
        and bool(manifest.parts)
        and all(part_ended(jobs_root, part) for part in manifest.parts)
    )


def read_launch_records(jobs_root: Path) -> tuple[dict[str, JobManifest | None], set[str]]:
    """Every job's manifest under ``jobs_root`` (a launch whose parts all ended read as
    stopped, :func:`launch_ended`), and the jobs whose manifest cannot be read."""
    records: dict[str, JobManifest | None] = {}
    unreadable: set[str] = set()
    if not jobs_root.is_dir():
        return records, unreadable
    for folder in sorted(jobs_root.iterdir()):
        path = folder / MANIFEST_NAME
        try:
            check_job_name(folder.name)
        except ElasticGridError:
            continue  # a part's folder (job--provider), the grid's own, anything else
        if not path.is_file():
            continue
        try:
            manifest = JobManifest.model_validate(json.loads(path.read_text()))
        except (OSError, ValueError) as exc:  # JSON or a bad manifest: keep its entries
            log.warning(
                "The manifest of job %s cannot be read (%s); its holdings stay.", folder.name, exc
            )
            unreadable.add(folder.name)
            continue
        if launch_ended(jobs_root, manifest):
            manifest = replace(manifest, state=LaunchPhase.STOPPED, down_reason=ENDED_REASON)
        records[folder.name] = manifest
    return records, unreadable


class GridLedgerStore:
    """The grid ledger of one jobs root (module docstring).

    :param jobs_root: the JobManager root shared by the workers and the triggerer.
    :param grace_s: how long a reservation no launch record confirmed is kept.
    :param clock: epoch seconds (the wall clock by default).
    """

    def __init__(
        self,
        jobs_root: Path | str,
        *,
        grace_s: float = RESERVATION_GRACE_S,
        clock: Callable[[], float] = epoch_now,
    ) -> None:
        self.jobs_root = Path(jobs_root)
        self.folder = self.jobs_root / GRID_FOLDER
        self.path = self.folder / LEDGER_NAME
        self.grace_s = grace_s
        self.clock = clock

    def _load(self, now: float, *, keep_corrupt: bool) -> tuple[GridLedger, str | None]:
        """The reconciled ledger, and a note when it had to be rebuilt."""
        records, unreadable = read_launch_records(self.jobs_root)
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            note = f"no grid ledger at {self.path}: rebuilt from the jobs' launch records"
            return rebuild(records, now=now), note
        try:
            stored = GridLedger.model_validate(json.loads(text))
        except NewerRecordError as exc:  # not corrupt: never moved aside, never rewritten
            if keep_corrupt:
                raise NewerRecordError(f"the grid ledger {self.path}: {exc}") from None
            note = f"the grid ledger {self.path} cannot be read here ({exc})"
            return rebuild(records, now=now), note + "; shown rebuilt from the launch records"
        except ValueError as exc:  # not JSON, or not a ledger
            note = f"the grid ledger {self.path} cannot be read ({exc})"
            if keep_corrupt:
                aside = self.path.with_name(f"{LEDGER_NAME}.corrupt-{now:.0f}")
                os.replace(self.path, aside)
                note += f"; kept as {aside.name} and rebuilt from the jobs' launch records"
                log.warning("%s", note)
            else:
                note += "; shown rebuilt from the jobs' launch records"
            return rebuild(records, now=now), note
        if keep_corrupt:  # a transaction: say once why a request leaves the queue
            for request in lapsed_requests(stored, now):
                log.warning(
                    "Job %s's request left the grid queue: its waiting task last looked at the "
                    "grid %.0f s ago, past its %.0f s lease (a lost worker or triggerer); its "
                    "shrink requests go with it, and it queues again if it comes back.",
                    request.job,
                    now - request.last_look,
                    request.lease_s,
                )
        ledger = reconcile(stored, records, now=now, grace_s=self.grace_s, unreadable=unreadable)
        return ledger, None

    def _write(self, ledger: GridLedger) -> None:
        """Replace the ledger file whole: temporary file, fsync, rename, fsync the folder; a
        failed write (a full disk) leaves the old ledger and no temporary file."""
        text = json.dumps(ledger.model_dump(), indent=1, sort_keys=True)
        write_atomically(self.path, text.encode())

    @contextmanager
    def transaction(self, *, timeout: float | None = None) -> Iterator[LedgerTransaction]:
        """Hold the grid lock, yield the reconciled ledger, write it back (module docstring);
        a :class:`TimeoutError` when ``timeout`` seconds pass before the lock is free."""
        import fcntl

        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            handle = open(self.folder / GRID_LOCK_NAME, "a+")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise ElasticGridError(
                f"jobs root {self.jobs_root} cannot be written ({exc.strerror or exc}), so the "
                f"grid ledger cannot be locked and nothing was changed: give this worker write "
                f"access to it"
            ) from None
        with handle:
            if not acquire_lock(handle.fileno(), timeout):
                raise TimeoutError(f"the grid ledger lock was busy for {timeout} seconds")
            try:
                now = self.clock()
                ledger, note = self._load(now, keep_corrupt=True)
                current = LedgerTransaction(ledger, now, note)
                yield current
                self._write(current.ledger)
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def snapshot(self) -> LedgerView:
        """The ledger as it stands, reconciled with the launch records, without the lock and
        without writing; a missing or corrupt file is shown rebuilt, with a note."""
        ledger, note = self._load(self.clock(), keep_corrupt=False)
        return LedgerView(ledger, note)
