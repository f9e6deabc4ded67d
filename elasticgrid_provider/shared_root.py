"""Detect a jobs root that the workers do not share, before it costs a second copy.

A job's scale state lives in an Airflow Variable (visible to every worker),
its files (manifest, lock, specs, iroh-tinker folders) under the JobManager
root on the worker's filesystem. A worker that finds the Variable but not the
files is looking at a jobs root that is not the one the job was launched
under: most often each worker has its own local folder. Launching there would
start a second copy of a job that still runs elsewhere, and a check there
would find "no job"; both fail instead with one sentence saying the jobs root
must be shared (README "Deploying"), or that the Variable can be deleted
when the job's files are gone for good. The Variable is read through the
hook (:meth:`ElasticGridHook.scale_state_exists`); the sentence is
:func:`~elasticgrid_provider.core.check.unshared_root_sentence`.
"""

from __future__ import annotations

from pathlib import Path

from elasticgrid_provider.core.check import unshared_root_sentence
from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.state import state_variable_key
from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook


def unshared_jobs_root_message(job_name: str, jobs_root: Path) -> str | None:
    """The one-sentence error when the job's state Variable exists but its files do not.

    Call it only after finding no manifest for ``job_name`` under ``jobs_root``;
    None means the job is simply new.
    """
    if not ElasticGridHook.scale_state_exists(job_name):
        return None
    return unshared_root_sentence(job_name, str(jobs_root), state_variable_key(job_name))


def require_shared_jobs_root(job_name: str, jobs_root: Path) -> None:
    """Raise :class:`ElasticGridError` when the jobs root is evidently not shared."""
    message = unshared_jobs_root_message(job_name, jobs_root)
    if message is not None:
        raise ElasticGridError(message)
