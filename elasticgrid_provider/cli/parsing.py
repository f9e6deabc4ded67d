"""The ``elasticgrid`` command line and the files it names; nothing is decided here.

Rules:

* Every command is a :class:`Command`; :data:`elasticgrid_provider.cli.COMMANDS`
  lists them and :func:`build_parser` turns that list into the parser.
* ``--json`` is accepted before or after the command (sub-parsers add it with
  ``SUPPRESS``, so one given before the command survives).
* A bad command line raises :class:`UsageError` (one line, exit status 2), not
  argparse's usage dump; ``--help`` and ``--version`` still print and exit 0.
  argparse checks only types, choices and exclusive options; the command checks
  ranges, so a message names the flag typed.
* A file is read whole as UTF-8; every problem (missing, a directory, not UTF-8,
  bad JSON, a bad field) is one :class:`ElasticGridError` sentence naming the file
  and the line or entry. A providers file is a JSON list or ``{"providers": [...]}``
  (default: the built-in grid); a samples file a JSON list or JSON Lines (blank
  lines ignored), as the step reporter writes it; a state file a scale state's JSON,
  bare or as Airflow exports it (one key whose value is the state or its JSON string).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from elasticgrid_provider import __version__
from elasticgrid_provider.core.errors import ElasticGridError, UsageError
from elasticgrid_provider.core.planner import PREFER_CHOICES
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.providers import DEFAULT_PROVIDERS, Provider, providers_from_dicts
from elasticgrid_provider.core.samples import DEFAULT_WINDOW_SIZE, StepSample
from elasticgrid_provider.core.schemas import SCHEMA_KINDS
from elasticgrid_provider.core.state import ScaleState

if TYPE_CHECKING:
    from elasticgrid_provider.cli.rendering import Result

T = TypeVar("T")
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
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in commands:
        sub = subparsers.add_parser(
            command.name, help=command.help, description=command.description
        )
        command.add_arguments(sub)
        sub.set_defaults(handler=command.run)
    for each in (parser, *subparsers.choices.values()):  # a sub-command keeps an earlier --json
        each.add_argument(
            "--json",
            action="store_true",
            default=False if each is parser else argparse.SUPPRESS,
            help="print JSON instead of text (also accepted before the command)",
        )
    return parser


def given(args: argparse.Namespace, name: str) -> bool:
    """True when the option ``name`` was given on the command line."""
    return getattr(args, name, None) is not None


def option_flag(name: str) -> str:
    """The option that sets ``name``: ``--window-size`` for ``window_size``."""
    return "--" + name.replace("_", "-")


def add_schema_arguments(parser: argparse.ArgumentParser) -> None:
    """``schema state|decision``."""
    parser.add_argument("kind", choices=SCHEMA_KINDS, help="the scale state or a decision record")


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
    parser.add_argument("--name", default="elasticgrid-job", help="job name (default %(default)s)")
    parser.add_argument(
        "--run",
        default="python train.py",
        metavar="CMD",
        help="command each rank runs (default %(default)r)",
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


SIMULATE_DESCRIPTION = (
    "Decide once over the window of the samples (or after every sample with "
    "--timeline), or replay a decision recorded in a scale-state Variable (--state). "
    "Samples without a 'time' field are timed by their duration_s, starting at 0."
)


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
SCHEDULER_FLAGS = {name: _RENAMED_FLAGS.get(name, option_flag(name)) for name in _SCHEDULER_HELP}
"""Each of those parameters with the flag that sets it."""

_NEEDS_DEADLINE = "(needs --deadline-in)"
SAMPLE_INPUTS: tuple[tuple[str, type, float | None, str, str], ...] = (
    ("nodes", int, 1, "N", "current size (default: the newest sample's nodes)"),
    ("window_size", int, 1, "W", f"samples the window keeps (default {DEFAULT_WINDOW_SIZE})"),
    (
        "now",
        float,
        None,
        "T",
        "decision time, epoch seconds (default: the newest sample's time); with "
        "--timeline, the time before the first sample (default 0)",
    ),
    (
        "deadline_in",
        float,
        None,
        "S",
        "a deadline S seconds after the decision time (with --timeline: after the newest "
        "sample's time)",
    ),
    ("remaining_steps", float, 0.0, "R", f"steps left after the newest sample {_NEEDS_DEADLINE}"),
    ("remaining_tokens", float, 0.0, "R", f"tokens left after the newest sample {_NEEDS_DEADLINE}"),
)
"""``simulate --samples``'s inputs: name, type, least value (None: any), metavar, help."""


SIMULATE_ONLY_FOR_SAMPLES = (
    *((name, option_flag(name)) for name, *_ in SAMPLE_INPUTS),
    *SCHEDULER_FLAGS.items(),
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
    work = inputs.add_mutually_exclusive_group()
    for name, kind, _, metavar, text in SAMPLE_INPUTS:
        group = work if name.startswith("remaining_") else inputs
        group.add_argument(option_flag(name), type=kind, metavar=metavar, help=text)
    inputs.add_argument(
        "--timeline",
        action="store_true",
        help="replay the samples in order and decide after each, carrying the cooldown",
    )
    scheduler = parser.add_argument_group("scheduler (with --samples)")
    defaults = {field.name: field.default for field in dataclasses.fields(ScalePolicy)}
    for field, text in _SCHEDULER_HELP.items():
        shown = "" if defaults[field] is None else f" (default {defaults[field]:g})"
        scheduler.add_argument(
            SCHEDULER_FLAGS[field], dest=field, type=float, metavar="X", help=text + shown
        )


def _read_text(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        raise ElasticGridError(f"{what} {path} does not exist") from None
    except IsADirectoryError:
        raise ElasticGridError(f"{what} {path} is a directory, not a file") from None
    except UnicodeDecodeError as error:
        raise ElasticGridError(f"{what} {path} is not UTF-8 text ({error.reason})") from None
    except OSError as error:
        raise ElasticGridError(f"cannot read {what} {path}: {error.strerror or error}") from None


def _parse_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ElasticGridError(
            f"{where} is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}"
        ) from None
    except RecursionError:
        raise ElasticGridError(f"{where} is nested too deeply to read") from None


def _load_json(path: str, what: str) -> Any:
    return _parse_json(_read_text(path, what), f"{what} {path}")


def from_dict(build: Callable[[Any], T], data: Any, where: str) -> T:
    """``build(data)``; its one-sentence error is prefixed with ``where`` (the file or entry)."""
    try:
        return build(data)
    except ElasticGridError as error:
        raise ElasticGridError(f"{where}: {error}") from None


def load_grid(path: str | None) -> tuple[Provider, ...]:
    """The providers of a providers file; the built-in grid when there is none."""
    if path is None:
        return DEFAULT_PROVIDERS
    return from_dict(providers_from_dicts, _load_json(path, "providers file"), path)


def load_samples(path: str) -> tuple[StepSample, ...]:
    """The samples of a samples file (a JSON list or JSON Lines), oldest first."""
    text = _read_text(path, "samples file")
    entries: list[tuple[str, Any]] = []
    if text.lstrip().startswith("["):
        data = _parse_json(text, f"samples file {path}")
        entries = [(f"{path} index {position}", entry) for position, entry in enumerate(data)]
    else:
        for number, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                entries.append((f"{path} line {number}", json.loads(line)))
            except json.JSONDecodeError as error:
                raise ElasticGridError(
                    f"{path} line {number}: not valid JSON: {error.msg} at column {error.colno}"
                ) from None
    if not entries:
        raise ElasticGridError(f"samples file {path} holds no samples")
    return tuple(from_dict(StepSample.from_dict, entry, where) for where, entry in entries)


def sample_clock(samples: Sequence[StepSample], start: float) -> list[float]:
    """Each sample's time: its ``time`` field, else the previous time plus its duration."""
    times: list[float] = []
    previous = start
    for sample in samples:
        previous = sample.time if sample.time is not None else previous + sample.duration_s
        times.append(previous)
    return times


def load_state(path: str) -> ScaleState:
    """The scale state of a state file, bare or as Airflow exports it (``{"key": state}``)."""
    data = _load_json(path, "state file")
    if isinstance(data, dict) and "schema_version" not in data and len(data) == 1:
        key, value = next(iter(data.items()))
        if isinstance(value, str):
            value = _parse_json(value, f"state file {path}: the value of {key!r}")
        data = value
    if not isinstance(data, dict) or "schema_version" not in data:
        raise ElasticGridError(
            f"state file {path} must hold a scale state (a JSON object with 'schema_version'), "
            "or an object with exactly one key whose value is one"
        )
    return from_dict(ScaleState.from_dict, data, f"state file {path}")
