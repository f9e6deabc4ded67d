"""iroh-tinker's ``JobManager``, with each part's state file replaced whole.

iroh-tinker 0.5 rewrites a part's ``job.json`` in place, and a status read rewrites it too
(a rank found down, a part found ended). Another process reading it meanwhile (a waiting
launch while a user stops the job, a scale check, the UI) could read half a file and fail.
Here every save goes through :func:`~elasticgrid_provider.atomic_files.write_json`, so a
reader sees the old state or the new one. Import it only where a manager is built: it
imports iroh-tinker (and so numpy).
"""

from __future__ import annotations

from dataclasses import asdict

from iroh_tinker.cloud import JobManager
from iroh_tinker.cloud.job import JobState

from elasticgrid_provider.atomic_files import write_json


class WholeFileJobManager(JobManager):
    """A ``JobManager`` whose state writes replace the file whole (same JSON as iroh-tinker's)."""

    def save(self, state: JobState) -> None:
        """Write ``state`` as iroh-tinker does, to a temporary file renamed over the old one."""
        path = self._state_path(state.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, asdict(state))
