"""Detect a jobs root that the workers do not share, before it costs a second copy.

A job's state Variable is visible to every worker, its files (manifest, lock,
specs) only under the JobManager root on the worker that launched it. A worker
that finds the Variable but not the files has another jobs root (most often a
local folder per worker): a launch there would start a second copy, a check
would find "no job". Both fail instead with one sentence
(:func:`~elasticgrid_provider.core.check.unshared_root_sentence`): share the
jobs root (README "Deploying"), or delete the Variable if the job is gone.
"""

from __future__ import annotations

from pathlib import Path

from elasticgrid_provider.core.check import unshared_root_sentence
from elasticgrid_provider.core.state import state_variable_key
from elasticgrid_provider.hooks.state_store import scale_state_exists


def unshared_jobs_root_message(job_name: str, jobs_root: Path) -> str | None:
    """The one-sentence error when the job's state Variable exists but its files do not (None:
    a new job); call it only after finding no manifest under ``jobs_root``."""
    if not scale_state_exists(job_name):
        return None
    return unshared_root_sentence(job_name, str(jobs_root), state_variable_key(job_name))
