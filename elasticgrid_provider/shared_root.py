"""Detect a jobs root that the workers do not share, before it costs a second copy.

A job's scale state lives in an Airflow Variable (visible to every worker),
its files (manifest, lock, specs, iroh-tinker folders) under the JobManager
root on the worker's filesystem. A worker that finds the Variable but not the
files is looking at a jobs root that is not the one the job was launched
under: most often each worker has its own local folder. Launching there would
start a second copy of a job that still runs elsewhere, and a check there
would find "no job"; both fail instead with one sentence saying the jobs root
must be shared (README "Deploying"), or that the Variable can be deleted
when the job's files are gone for good.
"""

from __future__ import annotations

from pathlib import Path

from airflow.sdk import Variable

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.state import state_variable_key


def unshared_jobs_root_message(job_name: str, jobs_root: Path) -> str | None:
    """The one-sentence error when the job's state Variable exists but its files do not.

    Call it only after finding no manifest for ``job_name`` under ``jobs_root``;
    None means the job is simply new.
    """
    key = state_variable_key(job_name)
    if Variable.get(key, default=None) is None:
        return None
    return (
        f"job {job_name!r} has a scale state in Variable {key!r} but no files under "
        f"{jobs_root} on this worker, so nothing was started: the jobs root must be shared "
        "by every worker that launches or checks the job (a shared filesystem, or its tasks "
        f"routed to one worker queue with queue=), or delete the Variable {key} if the job's "
        "files are gone for good"
    )


def require_shared_jobs_root(job_name: str, jobs_root: Path) -> None:
    """Raise :class:`ElasticGridError` when the jobs root is evidently not shared."""
    message = unshared_jobs_root_message(job_name, jobs_root)
    if message is not None:
        raise ElasticGridError(message)
