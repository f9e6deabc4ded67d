"""The ``elasticgrid`` command line: argparse only, no files read and nothing decided.

Rules:

* Every command is a :class:`Command`: its name, its help, the function that
  adds its options (one ``add_<command>_arguments`` here) and the function that
  runs it. :data:`elasticgrid_provider.cli.COMMANDS` lists them, the one place
  a command is registered; :func:`build_parser` turns that list into the parser.
* ``--json`` is accepted before or after the command: every sub-parser adds it
  with ``SUPPRESS`` so a ``--json`` given before the command survives.
* A bad command line raises :class:`UsageError` (one line, exit status 2)
  instead of argparse's usage dump and ``SystemExit``; ``--help`` and
  ``--version`` still print and exit 0.
* argparse checks only types, choices and mutually exclusive options; ranges
  and other combinations are checked by the command (with
  :mod:`~elasticgrid_provider.core.validation`), so a message names the flag
  the user typed.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

from elasticgrid_provider import __version__
from elasticgrid_provider.core.errors import UsageError
from elasticgrid_provider.core.planner import PREFER_CHOICES
from elasticgrid_provider.core.samples import DEFAULT_WINDOW_SIZE
from elasticgrid_provider.core.scheduler import ElasticScheduler
from elasticgrid_provider.core.schemas import SCHEMA_KINDS

if TYPE_CHECKING:
    from elasticgrid_provider.cli.rendering import Result

DEFAULT_JOB_NAME = "elasticgrid-job"
DEFAULT_RUN = "python train.py"
DEFAULT_RENDEZVOUS = "dir:/tmp/elasticgrid/{name}/rendezvous"
"""``spec`` previews a launch; a real launch needs a fresh rendezvous each time."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad command line raises instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


@dataclass(frozen=True)
class Command:
    """One sub-command: how it is called, its options and what runs it."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], Result]
    description: str | None = None


def build_parser(commands: Sequence[Command]) -> argparse.ArgumentParser:
    """The ``elasticgrid`` argument parser with one sub-parser per command."""
    parser = _Parser(
        prog="elasticgrid",
        description="Plan and size elastic cross-cloud training jobs on iroh-tinker.",
        epilog="Exit status: 0 ok; 1 a replayed decision differs from the recorded one; "
        "2 a user error (one line, never a traceback).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _add_json(parser, top=True)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in commands:
        sub = subparsers.add_parser(
            command.name, help=command.help, description=command.description
        )
        command.add_arguments(sub)
        _add_json(sub, top=False)
        sub.set_defaults(handler=command.run)
    return parser


def given(args: argparse.Namespace, name: str) -> bool:
    """True when the option ``name`` was given on the command line."""
    return getattr(args, name, None) is not None


def _add_json(parser: argparse.ArgumentParser, *, top: bool) -> None:
    # Sub-commands must not reset a --json given before the command: SUPPRESS keeps it.
    parser.add_argument(
        "--json",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="print JSON instead of text (also accepted before the command)",
    )


def add_schema_arguments(parser: argparse.ArgumentParser) -> None:
    """``schema state|decision``."""
    parser.add_argument("kind", choices=SCHEMA_KINDS, help="the scale state or a decision record")


# -- providers, plan, spec --------------------------------------------------------------


def add_providers_arguments(parser: argparse.ArgumentParser) -> None:
    """``providers [--providers FILE]``."""
    parser.add_argument(
        "--providers",
        metavar="FILE",
        help='providers file: a JSON list or {"providers": [...]} (default: the built-in grid)',
    )


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    """``plan --nodes N [--providers FILE] [--max-spot-fraction F] [--prefer cost|balance]``."""
    parser.add_argument("--nodes", type=int, required=True, metavar="N", help="nodes to place")
    add_providers_arguments(parser)
    parser.add_argument(
        "--max-spot-fraction",
        type=float,
        default=1.0,
        metavar="F",
        help="largest share of spot nodes, in [0, 1] (default 1)",
    )
    parser.add_argument(
        "--prefer",
        choices=PREFER_CHOICES,
        default="cost",
        help="cheapest placement, or the most even one (default cost)",
    )


def add_spec_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``plan`` options plus the job's name, command, processes and rendezvous."""
    add_plan_arguments(parser)
    parser.add_argument(
        "--name", default=DEFAULT_JOB_NAME, help=f"job name (default {DEFAULT_JOB_NAME})"
    )
    parser.add_argument(
        "--run",
        default=DEFAULT_RUN,
        metavar="CMD",
        help=f"command each rank runs (default {DEFAULT_RUN!r})",
    )
    parser.add_argument(
        "--procs-per-node", type=int, default=1, metavar="P", help="processes per node (default 1)"
    )
    parser.add_argument(
        "--rendezvous",
        metavar="URI",
        help="dir:/path, a path, s3://bucket/prefix or gs://bucket/prefix; use a fresh one "
        "per launch (default " + DEFAULT_RENDEZVOUS.format(name="NAME") + ")",
    )


# -- simulate ---------------------------------------------------------------------------

SIMULATE_DESCRIPTION = (
    "Decide once over the window of the samples (or after every sample with "
    "--timeline), or replay a decision recorded in a scale-state Variable (--state). "
    "Samples without a 'time' field are timed by their duration_s, starting at 0."
)


@dataclass(frozen=True)
class SchedulerOption:
    """An :class:`ElasticScheduler` parameter as a ``simulate`` option."""

    field: str
    flag: str
    kind: type
    help: str


_SCHEDULER_FIELDS = {field.name: field for field in dataclasses.fields(ElasticScheduler)}
_RENAMED_FLAGS = {
    "cooldown_s": "--cooldown",
    "scale_down_cooldown_s": "--scale-down-cooldown",
    "scale_down_window_s": "--scale-down-window",
}
"""Scheduler options whose flag is not the field name with dashes."""
_SCHEDULER_HELP = {
    "min_nodes": "smallest size",
    "max_nodes": "largest size",
    "cooldown_s": "seconds after a change before a scale-up",
    "scale_down_cooldown_s": "seconds after a change before a scale-down (default: --cooldown)",
    "scale_up_factor": "growth factor, > 1",
    "scale_down_factor": "shrink factor, in (0, 1)",
    "target_queue_fraction": "queue fraction at which to scale up",
    "idle_queue_fraction": "queue fraction at or below which the job may be idle",
    "idle_step_fraction": "idle when the mean step is at most this share of --target-step-s",
    "target_step_s": "target step time in seconds",
    "min_samples": "samples needed to decide",
    "startup_s": "seconds a resize stops progress (the restart)",
    "horizon_s": "seconds a resize must pay off in, when work is unknown",
    "resize_margin": "how much a resize's gain must beat its price",
    "headroom": "capacity kept above the measured demand",
    "tolerance": "capacity changes within it are noise",
    "drain_s": "seconds a backlog may take to clear",
    "scale_down_window_s": "seconds of recommendations a scale-down takes the largest of",
    "deadline_margin": "share of the time left kept spare",
    "final_stretch_s": "no shrink this close to the deadline (default: 4 x --startup-s)",
    "scaling_loss": "prior per-node throughput lost per doubling",
}
"""Each scheduler parameter the command exposes, in ``--help`` order, with its help."""

SCHEDULER_OPTIONS = tuple(
    SchedulerOption(
        field,
        _RENAMED_FLAGS.get(field, "--" + field.replace("_", "-")),
        int if _SCHEDULER_FIELDS[field].type in ("int", int) else float,
        text,
    )
    for field, text in _SCHEDULER_HELP.items()
)
"""The scheduler's parameters, each with the flag that sets it (type and default from it)."""

SIMULATE_ONLY_FOR_SAMPLES = (
    ("nodes", "--nodes"),
    ("window_size", "--window-size"),
    ("now", "--now"),
    ("deadline_in", "--deadline-in"),
    ("remaining_steps", "--remaining-steps"),
    ("remaining_tokens", "--remaining-tokens"),
    *((option.field, option.flag) for option in SCHEDULER_OPTIONS),
)
"""Options that decide from samples, so ``--state`` (a replay) refuses them."""


def add_simulate_arguments(parser: argparse.ArgumentParser) -> None:
    """``simulate``: the input (samples or a state), the decision inputs, the scheduler."""
    source = parser.add_argument_group("input")
    source.add_argument("--samples", metavar="FILE", help="step samples: a JSON list or JSON Lines")
    source.add_argument(
        "--state",
        metavar="FILE",
        help="a scale-state Variable's JSON (bare or as 'airflow variables export' writes it): "
        "replay a recorded decision; exit 1 when the replay differs",
    )
    source.add_argument(
        "--decision",
        type=int,
        metavar="I",
        help="with --state: the history index to replay; negative counts from the newest "
        "(default -1, the newest)",
    )
    inputs = parser.add_argument_group("decision inputs (with --samples)")
    inputs.add_argument(
        "--nodes", type=int, metavar="N", help="current size (default: the newest sample's nodes)"
    )
    inputs.add_argument(
        "--window-size",
        type=int,
        metavar="W",
        help=f"samples the window keeps (default {DEFAULT_WINDOW_SIZE})",
    )
    inputs.add_argument(
        "--now",
        type=float,
        metavar="T",
        help="decision time, epoch seconds (default: the newest sample's time); with "
        "--timeline, the time before the first sample (default 0)",
    )
    inputs.add_argument(
        "--deadline-in",
        type=float,
        metavar="S",
        help="a deadline S seconds after the decision time (with --timeline: after the newest "
        "sample's time)",
    )
    work = inputs.add_mutually_exclusive_group()
    work.add_argument(
        "--remaining-steps",
        type=float,
        metavar="R",
        help="steps left after the newest sample (needs --deadline-in)",
    )
    work.add_argument(
        "--remaining-tokens",
        type=float,
        metavar="R",
        help="tokens left after the newest sample (needs --deadline-in)",
    )
    inputs.add_argument(
        "--timeline",
        action="store_true",
        help="replay the samples in order and decide after each, carrying the cooldown",
    )
    scheduler = parser.add_argument_group("scheduler (with --samples)")
    for option in SCHEDULER_OPTIONS:
        default = _SCHEDULER_FIELDS[option.field].default
        shown = "" if default is None else f" (default {default:g})"
        scheduler.add_argument(
            option.flag,
            dest=option.field,
            type=option.kind,
            metavar="N" if option.kind is int else "X",
            help=option.help + shown,
        )
