"""iroh-tinker's ``JobManager``, with each part's state file replaced whole and a stop kept.

iroh-tinker 0.5 rewrites a part's ``job.json`` in place, and a status read rewrites it too
(a rank found down, a part found ended). Another process reading it meanwhile (a waiting
launch while a user stops the job, a scale check, the UI) could read half a file and fail.
Here every save replaces the file whole (:func:`~elasticgrid_provider.atomic_files.write_json`),
so a reader sees the old state or the new one. A status read that began before a stop and
saves after it would also overwrite ``stopped`` with what it saw (``running``, or ``failed``
once the stop killed the ranks): a save of the same ranks over a ``stopped`` state is
dropped (under a lock file beside ``job.json``). Import this only where a manager is built:
it imports iroh-tinker (and numpy).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict
from pathlib import Path
from typing import Any

from iroh_tinker.cloud import JobManager
from iroh_tinker.cloud.job import JobState

from elasticgrid_provider.atomic_files import acquire_lock, write_json

STOPPED = "stopped"
LOCK_NAME = ".job.json.lock"  # beside job.json: iroh-tinker lists folders by their job.json


class WholeFileJobManager(JobManager):
    """A ``JobManager`` whose state writes replace the file whole (same JSON as iroh-tinker's)
    and never undo a stop of the same ranks."""

    def save(self, state: JobState) -> None:
        """Write ``state`` as iroh-tinker does, to a temporary file renamed over the old one,
        unless it would overwrite a stop of the same ranks (a stale status read)."""
        path = self._state_path(state.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(path.with_name(LOCK_NAME)):
            if not _undoes_a_stop(path, state):
                write_json(path, asdict(state))


@contextmanager
def _locked(lock_file: Path) -> Iterator[None]:
    """An exclusive flock of the part's lock file, for one save. A file opened for writing,
    as the job's lock is: NFS, where a jobs root may live, refuses an exclusive lock on a
    descriptor opened read-only (a folder's)."""
    descriptor = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        acquire_lock(descriptor, None)
        yield
    finally:
        os.close(descriptor)  # releases the lock


def _undoes_a_stop(path: Path, state: JobState) -> bool:
    """Whether the saved state is ``stopped`` and ``state`` is the same ranks (their pids and
    start time) with another status: a refresh that read the state before the stop."""
    current: dict[str, Any] = {}
    with suppress(OSError, ValueError):
        current = json.loads(path.read_text())
    return (
        current.get("status") == STOPPED
        and state.status != STOPPED
        and bool(state.pids)
        and current.get("pids") == state.pids
        and current.get("created") == state.created
    )
