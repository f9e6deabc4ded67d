"""The ``elasticgrid`` command line and the files it names; nothing is decided here.

Every command is a :class:`Command`; :func:`build_parser` turns
:data:`elasticgrid_provider.cli.COMMANDS` into the parser. argparse checks only types,
choices and exclusive options; the command checks ranges, so a message names the flag typed.
The rules: docs/cli.md.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from elasticgrid_provider import __version__
from elasticgrid_provider.core.errors import ElasticGridError, UsageError
from elasticgrid_provider.core.planner import PREFER_CHOICES
from elasticgrid_provider.core.policy.parameters import (
    PARAMETER_DEFAULTS,
    POLICY_PARAMETERS,
    parameter_about,
)
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
        epilog="Exit status: 0 ok; 1 a replayed decision differs from the recorded one, or a "
        "stop could not finish; 2 a user error (one line, never a traceback).",
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


POLICY_FLAGS = {name: parameter_about(name).flag or option_flag(name) for name in POLICY_PARAMETERS}
"""Each policy parameter with the flag that sets it, from the fields of
:class:`~elasticgrid_provider.core.policy.parameters.ScalePolicy` (``--help`` order)."""

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
    (
        "total_steps",
        float,
        0.0,
        "N",
        "the job's steps in all: each decision counts the steps left from the window's newest "
        f"step, as the sensor's total_steps does; not with --remaining-steps {_NEEDS_DEADLINE}",
    ),
)
"""``simulate --samples``'s inputs: name, type, least value (None: any), metavar, help."""


SIMULATE_ONLY_FOR_SAMPLES = (
    *((name, option_flag(name)) for name, *_ in SAMPLE_INPUTS),
    *POLICY_FLAGS.items(),
)
"""Options that decide from samples, so ``--state`` (a replay) refuses them."""


def add_simulate_arguments(parser: argparse.ArgumentParser) -> None:
    """``simulate``: the input (samples or a state), the decision inputs, the policy."""
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
    policy = parser.add_argument_group("policy (with --samples)")
    for field, flag in POLICY_FLAGS.items():
        default = PARAMETER_DEFAULTS[field]
        shown = "" if default is None else f" (default {default:g})"
        text = parameter_about(field).help + shown
        policy.add_argument(flag, dest=field, type=float, metavar="X", help=text)


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


def with_where(build: Callable[[Any], T], data: Any, where: str) -> T:
    """``build(data)``; its one-sentence error is prefixed with ``where`` (the file or entry)."""
    try:
        return build(data)
    except ElasticGridError as error:
        raise ElasticGridError(f"{where}: {error}") from None


def load_grid(path: str | None) -> tuple[Provider, ...]:
    """The providers of a providers file; the built-in grid when there is none."""
    if path is None:
        return DEFAULT_PROVIDERS
    return with_where(providers_from_dicts, _load_json(path, "providers file"), path)


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
    return tuple(with_where(StepSample.model_validate, entry, where) for where, entry in entries)


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
    return with_where(ScaleState.model_validate, data, f"state file {path}")
