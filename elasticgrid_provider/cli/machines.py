"""``elasticgrid machines JOB``: the cloud instances of each part of a job's current launch.

Per part: instance id, type, market (spot / on-demand), zone, state (a spot instance the
cloud took back says so) and launch time, as the engine last saw them
(:func:`~elasticgrid_provider.hooks.job_machines.job_machines`, which the job page also
shows). The jobs root is found as ``elasticgrid stop`` finds it (``--jobs-root``, else the
``elasticgrid`` connection's). Nothing is asked of the cloud: this reads the records.

``--json``: ``{"job_name", "launch_id", "parts", "machines": [{"part", "instance_id",
"instance_type", "market", "zone", "state", "launched_at", "address", "state_reason",
"reclaimed"}], "errors"}``. Exit status 0; 2 on bad input (a bad job name, a job never
launched under the jobs root).
"""

from __future__ import annotations

import argparse

from elasticgrid_provider.cli.jobs_root import add_jobs_root_arguments, existing_jobs_root
from elasticgrid_provider.cli.rendering import Result
from elasticgrid_provider.core.launch_spec import check_job_name

MACHINES_HELP = "show a job's cloud instances per part: id, type, market, zone, state, launch time"


def add_machines_arguments(parser: argparse.ArgumentParser) -> None:
    """``machines JOB [--jobs-root DIR] [--conn-id ID]``."""
    parser.add_argument("job", metavar="JOB", help="the job's name (its LaunchOperator job_name)")
    add_jobs_root_arguments(parser)


def run_machines(args: argparse.Namespace) -> Result:
    """``machines JOB``: the job's instances (module docstring)."""
    from elasticgrid_provider.hooks.job_machines import job_machines, machines_text

    check_job_name(args.job)
    view = job_machines(existing_jobs_root(args), args.job)
    return Result(machines_text(view), view)
