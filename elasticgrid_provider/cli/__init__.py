"""The ``elasticgrid`` command: the grid, placements, launch parts and scale decisions.

Its commands, options, exit status and JSON output: docs/cli.md. A user error exits 2 with one
line, never a traceback. The package: :mod:`~elasticgrid_provider.cli.parsing` (argparse; the
input files), :mod:`~elasticgrid_provider.cli.commands` (run a command, return a ``Result``) and
:mod:`~elasticgrid_provider.cli.rendering` (text, JSON, errors); ``fleet``, ``stop`` and
``machines`` have modules of their own. To add a command: an ``add_<name>_arguments`` in
``parsing``, a ``run_<name>`` in ``commands``, and one :class:`Command` in :data:`COMMANDS`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from elasticgrid_provider.cli import commands, fleet, machines, parsing, stop
from elasticgrid_provider.cli.commands import REPLAY_FIELDS as REPLAY_FIELDS
from elasticgrid_provider.cli.parsing import Command
from elasticgrid_provider.cli.rendering import EXIT_FAILED, EXIT_OK, Result, emit, fail
from elasticgrid_provider.core.errors import ElasticGridError, JobStopError

COMMANDS: tuple[Command, ...] = (
    Command(
        "providers",
        "show the grid of providers",
        parsing.add_providers_arguments,
        commands.run_providers,
    ),
    Command(
        "plan",
        "place N nodes on the grid and cost it",
        parsing.add_plan_arguments,
        commands.run_plan,
    ),
    Command(
        "spec",
        "plan, then render the iroh-tinker launch parts (one per provider)",
        parsing.add_spec_arguments,
        commands.run_spec,
    ),
    Command(
        "simulate",
        "decide the size from step samples, or replay a recorded decision",
        parsing.add_simulate_arguments,
        commands.run_simulate,
        parsing.SIMULATE_DESCRIPTION,
    ),
    Command(
        "schema",
        "print the JSON Schema of a stored document (the scale state, a decision record)",
        parsing.add_schema_arguments,
        commands.run_schema,
    ),
    Command("fleet", fleet.FLEET_HELP, fleet.add_fleet_arguments, fleet.run_fleet),
    Command("stop", stop.STOP_HELP, stop.add_stop_arguments, stop.run_stop),
    Command(
        "machines",
        machines.MACHINES_HELP,
        machines.add_machines_arguments,
        machines.run_machines,
    ),
)
"""Every ``elasticgrid`` command, in the order ``--help`` lists them: the one registry."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``elasticgrid`` with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    options_part = arguments[: arguments.index("--")] if "--" in arguments else arguments
    want_json = "--json" in options_part
    try:
        args = parsing.build_parser(COMMANDS).parse_args(arguments)
        want_json = bool(args.json)
        result: Result = args.handler(args)
    except SystemExit as exit_request:  # --help, --version
        code = exit_request.code
        return code if isinstance(code, int) else EXIT_OK
    except (ElasticGridError, OSError, json.JSONDecodeError) as error:  # UsageError too
        return fail(str(error), want_json)
    except JobStopError as error:  # not bad input: the stop could not finish
        return fail(str(error), want_json, EXIT_FAILED)
    return emit(result, want_json)
