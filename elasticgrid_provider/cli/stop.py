"""``elasticgrid stop JOB``: stop every part of a job, on any engine, and say what was stopped.

The stop itself is :func:`~elasticgrid_provider.hooks.launch_stop.stop_job`; Airflow is
imported only to read the connection. Progress goes to stderr, the report to stdout. The
rules: docs/cli.md ("stop"), docs/operators.md ("StopJobOperator").
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
    """``stop JOB``: stop the job under the jobs root (docs/cli.md)."""
    from elasticgrid_provider.hooks.job_store import JobStore
    from elasticgrid_provider.hooks.launch_stop import stop_job

    check_job_name(args.job)  # before any connection or folder is read
    log = progress_log(quiet=args.json)
    root = existing_jobs_root(args)
    report = stop_job(JobStore(root, log), args.job, STOPPED_BY)
    return Result(report.text(), report.model_dump())
