"""``elasticgrid stop JOB``: stop every part of a job, on any engine, and say what was stopped.

The jobs root is ``--jobs-root``, else, as the operators find it, the ``jobs_root`` of the
``elasticgrid`` connection (``--conn-id``, default ``elasticgrid_default``, from the
environment or the Airflow metadata DB), else iroh-tinker's default. Only the default
connection may be missing; a ``--conn-id`` naming none is an error, lest the stop look
under another jobs root. Airflow is imported only to read that connection.

The stop itself is :func:`~elasticgrid_provider.hooks.launch_stop.stop_job` (the job's lock,
its launch record, the grid ledger); it waits for the job's lock as long as a launch,
resize or scale check of the job holds it, and says so on stderr. Progress goes to stderr;
the report (:class:`~elasticgrid_provider.core.job_stop.JobStopReport`) to stdout, as text
or, with ``--json``, its ``model_dump()``: ``{"job_name", "launch_id", "launch_state",
"job_status", "parts": [{"name", "provider", "engine", "nodes", "ranks"}],
"other_processes", "released_nodes", "nothing_left"}``.

Exit status: 0 when the job was stopped or had nothing left to stop (a second stop); 2 on
bad input (a bad job name, a job never launched under the jobs root, a missing
connection); 1 when the stop could not finish (the job's record says ``stopping``, and the
next stop finishes it). Each error is one line.
"""

from __future__ import annotations

import argparse
import logging
import sys

from elasticgrid_provider.cli.jobs_root import (
    add_jobs_root_arguments,
    existing_jobs_root,
)
from elasticgrid_provider.cli.rendering import Result
from elasticgrid_provider.core.launch_spec import check_job_name

STOP_HELP = "stop every part of a job (any engine), record it stopped, release its grid nodes"
STOPPED_BY = "stopped with `elasticgrid stop`"


def add_stop_arguments(parser: argparse.ArgumentParser) -> None:
    """``stop JOB [--jobs-root DIR] [--conn-id ID]``."""
    parser.add_argument("job", metavar="JOB", help="the job's name (its LaunchOperator job_name)")
    add_jobs_root_arguments(parser)


class _StderrHandler(logging.Handler):
    """Writes to ``sys.stderr`` as it is when a line is logged (a handler that kept the stream
    of its first call would write to a closed one when the CLI runs twice in one process)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:  # logging's own rule: a failed write never raises into the caller
            self.handleError(record)


def progress_log(quiet: bool) -> logging.Logger:
    """A logger printing progress lines to stderr (warnings only when ``quiet``)."""
    log = logging.getLogger("elasticgrid.cli.stop")
    log.propagate = False
    if not log.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
    log.setLevel(logging.WARNING if quiet else logging.INFO)
    return log


def run_stop(args: argparse.Namespace) -> Result:
    """``stop JOB``: stop the job under the jobs root (module docstring)."""
    from elasticgrid_provider.hooks.job_store import JobStore
    from elasticgrid_provider.hooks.launch_stop import stop_job

    check_job_name(args.job)  # before any connection or folder is read
    log = progress_log(quiet=args.json)
    root = existing_jobs_root(args)
    report = stop_job(JobStore(root, log), args.job, STOPPED_BY)
    return Result(report.text(), report.model_dump())
