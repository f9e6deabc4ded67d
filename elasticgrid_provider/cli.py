"""The ``elasticgrid`` command: the grid, placements, launch parts and scale decisions.

Synopsis::

    elasticgrid [--json] providers [--providers FILE]
    elasticgrid [--json] plan --nodes N [--providers FILE] [--max-spot-fraction F]
                              [--prefer cost|balance]
    elasticgrid [--json] spec --nodes N [--name NAME] [--run CMD] [--providers FILE]
                              [--max-spot-fraction F] [--prefer cost|balance]
                              [--procs-per-node P] [--rendezvous URI]
    elasticgrid [--json] simulate --samples FILE [--nodes N] [--window-size W]
                              [--now T] [--deadline-in S]
                              [--remaining-steps R | --remaining-tokens R]
                              [scheduler options] [--timeline]
    elasticgrid [--json] simulate --state FILE [--decision I]

``--json`` is accepted before or after the command. Exit status: 0 on
success; 1 when ``simulate --state`` replays a decision that differs from the
recorded one; 2 on any user error (missing or unreadable file, bad JSON, a
missing or wrong-typed field, NaN, an impossible size, a bad option), printed
as one line, ``error: ...`` on stderr (``{"error": "..."}`` on stdout with
``--json``), never a traceback.

Input files:

* a providers file is a JSON list of providers or ``{"providers": [...]}``;
  without one the built-in grid of SPEC 4.5 is used;
* a samples file is a JSON list of sample objects or JSON Lines (one object
  per line, blank lines ignored), as the step reporter writes it; the
  reporter's ``time`` field (epoch seconds the line was written, i.e. when
  the step ended) is read for the clock and kept in the sample (the
  scheduler reads arrival rates from it);
* a state file is the JSON of a job's scale-state Variable
  (``ScaleState.to_dict()``), bare or as Airflow exports Variables: an
  object with exactly one key whose value is the state (or the state as a
  JSON string).

The clock of ``simulate`` (deterministic, no wall clock is read):

* each sample has a time: its ``time`` field when present, else the previous
  sample's time plus its own ``duration_s``; the time before the first
  sample is 0 (``--now`` with ``--timeline``);
* a single decision is made at ``--now``, default the newest sample's time;
* ``--timeline`` decides after every sample, at that sample's time;
* ``--deadline-in S`` puts the deadline S seconds after the single
  decision's time; with ``--timeline``, S seconds after the newest sample's
  time, so every decision of the timeline works to the same deadline;
* ``--remaining-steps`` / ``--remaining-tokens`` are the work left after the
  newest sample; in the timeline, the decision after an earlier sample also
  counts the samples still to come (one step each, and their tokens).

The timeline runs the sensor's state transition
(:meth:`~elasticgrid_provider.core.state.ScaleState.advance`: observe ->
decide -> remember) once per sample, in file order, so it keeps the same
window rules as the sensor: only samples measured at the current size enter
the window, a resize starts a fresh window, and the cooldown clock, the
capacity memory and the recent recommendations carry from one decision to
the next. The current size starts at ``--nodes`` (default: the first
sample's ``nodes``), becomes each scale decision's target, and follows the
samples when their ``nodes`` value changes (the samples say the job was
resized). A single decision (no ``--timeline``) observes all samples at once
at the current size (default: the newest sample's).

``simulate --state`` replays history entry ``--decision`` (default -1, the
newest) from its recorded inputs and compares ``action``, ``current_nodes``,
``target_nodes``, ``rule``, ``held_by`` and ``reason`` with the recorded
decision: exit 0 when they all agree, 1 when any differs. A record whose
inputs lack ``capacity`` and ``recent`` (a version 1 state) was made by an
older policy; the output says so, since today's rules may decide otherwise.

JSON output (``--json``), keeping 0.1.0's keys:

* ``providers``: ``{"providers": [Provider.to_dict(), ...]}``;
* ``plan``: ``Placement.to_dict()``;
* ``spec``: ``{"job_name", "placement", "world_size", "parts": [{"part_name",
  "provider", "nodes", "rank_offset", "world_size", "infra", "spec"}]}``;
* ``simulate``: ``{"window", "decision"}``: the window's signals plus
  ``size``, ``kept``, ``total`` and ``dropped`` (plus ``other_size``: samples left out
  for being measured at another size than the current), and ``ScaleDecision.to_dict()``;
* ``simulate --timeline``: ``{"timeline": [{"sample" (1-based), "step",
  "time", "window_samples", "decision"}], "window"}``;
* ``simulate --state``: ``{"replay": {"state_file", "job_name", "index",
  "history_size", "matches", "differences", "older_policy"}, "window", "recorded",
  "decision"}``; ``older_policy``: the record predates the restart-aware policy's inputs;
* errors: ``{"error": "..."}``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.formatting import (
    clock_text,
    held_text,
    number_text,
    placement_table,
    rule_text,
    seconds_text,
)
from elasticgrid_provider.core.launch_spec import LaunchOptions, build_launch_parts
from elasticgrid_provider.core.placement import Placement
from elasticgrid_provider.core.planner import PREFER_CHOICES, GridPlanner
from elasticgrid_provider.core.providers import (
    DEFAULT_PROVIDERS,
    Provider,
    providers_from_dicts,
)
from elasticgrid_provider.core.samples import (
    DEFAULT_WINDOW_SIZE,
    MetricsWindow,
    StepSample,
    WindowSignals,
)
from elasticgrid_provider.core.scheduler import (
    CooldownClock,
    ElasticScheduler,
    ScaleDecision,
)
from elasticgrid_provider.core.schemas import SCHEMA_KINDS, json_schema
from elasticgrid_provider.core.state import (
    JOB_ENDED_RULE,
    DecisionRecord,
    ScaleState,
    recorded_by_older_policy,
)
from elasticgrid_provider.core.validation import check_integer, check_number

EXIT_OK = 0
EXIT_REPLAY_MISMATCH = 1
EXIT_USAGE = 2

DEFAULT_JOB_NAME = "elasticgrid-job"
DEFAULT_RUN = "python train.py"
DEFAULT_RENDEZVOUS = "dir:/tmp/elasticgrid/{name}/rendezvous"
"""``spec`` previews a launch; a real launch needs a fresh rendezvous each time."""

SIMULATED_JOB = "simulate"
"""The job name of the state ``simulate`` runs its transition on."""
REPLAY_FIELDS = ("action", "current_nodes", "target_nodes", "rule", "held_by", "reason")
"""What must agree for a replayed decision to match the recorded one."""

_EPOCH_LIKE = 1e9
"""Clock values from here on are shown as UTC times too (from 2001-09-09 on)."""


# -- the scheduler's parameters as options ----------------------------------------------


@dataclass(frozen=True)
class _SchedulerOption:
    field: str
    flag: str
    kind: type
    help: str


_SCHEDULER_OPTIONS = (
    _SchedulerOption("min_nodes", "--min-nodes", int, "smallest size"),
    _SchedulerOption("max_nodes", "--max-nodes", int, "largest size"),
    _SchedulerOption("cooldown_s", "--cooldown", float, "seconds after a change before a scale-up"),
    _SchedulerOption(
        "scale_down_cooldown_s",
        "--scale-down-cooldown",
        float,
        "seconds after a change before a scale-down (default: --cooldown)",
    ),
    _SchedulerOption("scale_up_factor", "--scale-up-factor", float, "growth factor, > 1"),
    _SchedulerOption("scale_down_factor", "--scale-down-factor", float, "shrink factor, in (0, 1)"),
    _SchedulerOption(
        "target_queue_fraction",
        "--target-queue-fraction",
        float,
        "queue fraction at which to scale up",
    ),
    _SchedulerOption(
        "idle_queue_fraction",
        "--idle-queue-fraction",
        float,
        "queue fraction at or below which the job may be idle",
    ),
    _SchedulerOption(
        "idle_step_fraction",
        "--idle-step-fraction",
        float,
        "idle when the mean step is at most this share of --target-step-s",
    ),
    _SchedulerOption("target_step_s", "--target-step-s", float, "target step time in seconds"),
    _SchedulerOption("min_samples", "--min-samples", int, "samples needed to decide"),
    _SchedulerOption(
        "startup_s", "--startup-s", float, "seconds a resize stops progress (the restart)"
    ),
    _SchedulerOption(
        "horizon_s", "--horizon-s", float, "seconds a resize must pay off in, when work is unknown"
    ),
    _SchedulerOption(
        "resize_margin", "--resize-margin", float, "how much a resize's gain must beat its price"
    ),
    _SchedulerOption("headroom", "--headroom", float, "capacity kept above the measured demand"),
    _SchedulerOption("tolerance", "--tolerance", float, "capacity changes within it are noise"),
    _SchedulerOption("drain_s", "--drain-s", float, "seconds a backlog may take to clear"),
    _SchedulerOption(
        "scale_down_window_s",
        "--scale-down-window",
        float,
        "seconds of recommendations a scale-down takes the largest of",
    ),
    _SchedulerOption(
        "deadline_margin", "--deadline-margin", float, "share of the time left kept spare"
    ),
    _SchedulerOption(
        "final_stretch_s",
        "--final-stretch-s",
        float,
        "no shrink this close to the deadline (default: 4 x --startup-s)",
    ),
    _SchedulerOption(
        "scaling_loss", "--scaling-loss", float, "prior per-node throughput lost per doubling"
    ),
)

_SCHEDULER_DEFAULTS = {field.name: field.default for field in dataclasses.fields(ElasticScheduler)}

_SIMULATE_ONLY_FOR_SAMPLES = (
    ("nodes", "--nodes"),
    ("window_size", "--window-size"),
    ("now", "--now"),
    ("deadline_in", "--deadline-in"),
    ("remaining_steps", "--remaining-steps"),
    ("remaining_tokens", "--remaining-tokens"),
    *((option.field, option.flag) for option in _SCHEDULER_OPTIONS),
)


# -- argument parsing -------------------------------------------------------------------


class _UsageError(Exception):
    """A bad command line, reported as one line with exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad command line raises instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{self.prog}: {message}")


def _add_json(parser: argparse.ArgumentParser, *, top: bool) -> None:
    # Sub-commands must not reset a --json given before the command: SUPPRESS keeps it.
    parser.add_argument(
        "--json",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="print JSON instead of text (also accepted before the command)",
    )


def _add_grid_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--providers",
        metavar="FILE",
        help='providers file: a JSON list or {"providers": [...]} (default: the built-in grid)',
    )


def _add_plan_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, required=True, metavar="N", help="nodes to place")
    _add_grid_options(parser)
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


def build_parser() -> argparse.ArgumentParser:
    """The ``elasticgrid`` argument parser."""
    parser = _Parser(
        prog="elasticgrid",
        description="Plan and size elastic cross-cloud training jobs on iroh-tinker.",
        epilog="Exit status: 0 ok; 1 a replayed decision differs from the recorded one; "
        "2 a user error (one line, never a traceback).",
    )
    _add_json(parser, top=True)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    providers = commands.add_parser("providers", help="show the grid of providers")
    _add_grid_options(providers)
    _add_json(providers, top=False)
    providers.set_defaults(handler=_cmd_providers)

    plan = commands.add_parser("plan", help="place N nodes on the grid and cost it")
    _add_plan_options(plan)
    _add_json(plan, top=False)
    plan.set_defaults(handler=_cmd_plan)

    spec = commands.add_parser(
        "spec", help="plan, then render the iroh-tinker launch parts (one per provider)"
    )
    _add_plan_options(spec)
    spec.add_argument(
        "--name", default=DEFAULT_JOB_NAME, help=f"job name (default {DEFAULT_JOB_NAME})"
    )
    spec.add_argument(
        "--run",
        default=DEFAULT_RUN,
        metavar="CMD",
        help=f"command each rank runs (default {DEFAULT_RUN!r})",
    )
    spec.add_argument(
        "--procs-per-node", type=int, default=1, metavar="P", help="processes per node (default 1)"
    )
    spec.add_argument(
        "--rendezvous",
        metavar="URI",
        help="dir:/path, a path, s3://bucket/prefix or gs://bucket/prefix; use a fresh one "
        "per launch (default " + DEFAULT_RENDEZVOUS.format(name="NAME") + ")",
    )
    _add_json(spec, top=False)
    spec.set_defaults(handler=_cmd_spec)

    simulate = commands.add_parser(
        "simulate",
        help="decide the size from step samples, or replay a recorded decision",
        description="Decide once over the window of the samples (or after every sample with "
        "--timeline), or replay a decision recorded in a scale-state Variable (--state). "
        "Samples without a 'time' field are timed by their duration_s, starting at 0.",
    )
    source = simulate.add_argument_group("input")
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
    inputs = simulate.add_argument_group("decision inputs (with --samples)")
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
    scheduler = simulate.add_argument_group("scheduler (with --samples)")
    for option in _SCHEDULER_OPTIONS:
        default = _SCHEDULER_DEFAULTS[option.field]
        shown = "" if default is None else f" (default {default:g})"
        scheduler.add_argument(
            option.flag,
            dest=option.field,
            type=option.kind,
            metavar="N" if option.kind is int else "X",
            help=option.help + shown,
        )
    _add_json(simulate, top=False)
    simulate.set_defaults(handler=_cmd_simulate)

    schema = commands.add_parser("schema", help="print the JSON Schema of a stored document")
    schema.add_argument("kind", choices=SCHEMA_KINDS, help="the scale state or a decision record")
    _add_json(schema, top=False)
    schema.set_defaults(handler=_cmd_schema)
    return parser


def _cmd_schema(args: argparse.Namespace) -> _Result:
    """``elasticgrid schema state|decision``: the document's JSON Schema (always JSON)."""
    schema = json_schema(args.kind)
    return _Result(json.dumps(schema, indent=2), schema)


# -- running ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Result:
    """What a command prints (text or JSON) and its exit status."""

    text: str
    data: dict[str, Any]
    code: int = EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``elasticgrid`` with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    options_part = arguments[: arguments.index("--")] if "--" in arguments else arguments
    want_json = "--json" in options_part
    try:
        args = build_parser().parse_args(arguments)
        want_json = bool(args.json)
        handler: Callable[[argparse.Namespace], _Result] = args.handler
        result = handler(args)
    except SystemExit as exit_request:  # --help
        code = exit_request.code
        return code if isinstance(code, int) else EXIT_OK
    except (_UsageError, ElasticGridError, OSError, json.JSONDecodeError) as error:
        return _fail(str(error), want_json)
    try:
        if want_json:
            print(json.dumps(result.data, indent=2, allow_nan=False))
        else:
            print(result.text)
        sys.stdout.flush()
    except BrokenPipeError:  # `elasticgrid ... | head`: stop quietly
        _silence_stdout()
    return result.code


def _fail(message: str, want_json: bool) -> int:
    line = " ".join(message.split())  # one line, whatever the message holds
    if want_json:
        print(json.dumps({"error": line}))
    else:
        print(f"error: {line}", file=sys.stderr)
    return EXIT_USAGE


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


# -- files ------------------------------------------------------------------------------


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


def _load_grid(path: str | None) -> tuple[Provider, ...]:
    if path is None:
        return DEFAULT_PROVIDERS
    data = _load_json(path, "providers file")
    try:
        return providers_from_dicts(data)
    except ElasticGridError as error:
        raise ElasticGridError(f"{path}: {error}") from None


@dataclass(frozen=True)
class _SampleFile:
    """The samples of a file, oldest first, with each one's time on the simulation clock."""

    path: str
    samples: tuple[StepSample, ...]
    times: tuple[float | None, ...]  # each sample's own ``time`` field, if any

    def clock(self, start: float) -> list[float]:
        """Each sample's time: its ``time`` field, else the previous time plus its duration."""
        times: list[float] = []
        previous = start
        for sample, stamped in zip(self.samples, self.times, strict=True):
            previous = stamped if stamped is not None else previous + sample.duration_s
            times.append(previous)
        return times


def _load_samples(path: str) -> _SampleFile:
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
                entry = json.loads(line)
            except json.JSONDecodeError as error:
                raise ElasticGridError(
                    f"{path} line {number}: not valid JSON: {error.msg} at column {error.colno}"
                ) from None
            entries.append((f"{path} line {number}", entry))
    if not entries:
        raise ElasticGridError(f"samples file {path} holds no samples")
    samples: list[StepSample] = []
    times: list[float | None] = []
    for where, entry in entries:
        try:
            stamped = None
            if isinstance(entry, dict) and "time" in entry:
                stamped = check_number("sample time", entry["time"], minimum=None)
            samples.append(StepSample.from_dict(entry))
            times.append(stamped)
        except ElasticGridError as error:
            raise ElasticGridError(f"{where}: {error}") from None
    return _SampleFile(path, tuple(samples), tuple(times))


# -- providers --------------------------------------------------------------------------


def _table(rows: Sequence[Sequence[str]], right: Sequence[int] = ()) -> str:
    """Aligned columns, two spaces apart; ``right`` lists right-aligned columns."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(width) if column in right else cell.ljust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _cmd_providers(args: argparse.Namespace) -> _Result:
    grid = _load_grid(args.providers)
    rows = [("name", "region", "max_nodes", "$/node/h", "accelerator", "spot", "engine")]
    for provider in grid:
        rows.append(
            (
                provider.name,
                provider.region or "-",
                str(provider.max_nodes),
                f"{provider.cost_per_node_hour:.2f}",
                provider.accelerator or "-",
                "yes" if provider.spot else "no",
                provider.engine_name,
            )
        )
    capacity = sum(provider.max_nodes for provider in grid)
    on_demand = sum(provider.max_nodes for provider in grid if not provider.spot)
    source = "built-in grid" if args.providers is None else args.providers
    summary = (
        f"{len(grid)} providers ({source}): capacity {capacity} nodes, "
        f"{on_demand} on-demand and {capacity - on_demand} spot"
    )
    text = _table(rows, right=(2, 3)) + "\n\n" + summary
    return _Result(text, {"providers": [provider.to_dict() for provider in grid]})


# -- plan -------------------------------------------------------------------------------


def _plan(args: argparse.Namespace) -> tuple[GridPlanner, Placement]:
    grid = _load_grid(args.providers)
    planner = GridPlanner(grid, max_spot_fraction=args.max_spot_fraction, prefer=args.prefer)
    return planner, planner.plan(args.nodes)


def _plan_summary(planner: GridPlanner, placement: Placement) -> str:
    count = len(placement.assignments)
    if count == 0:
        return "0 nodes: an empty placement, nothing to run"
    nodes = placement.total_nodes
    allowance = planner.spot_allowance(nodes)
    # The policy is bent when the spot nodes the job must use, N - on-demand capacity (a
    # whole number), exceed floor(fraction * N); the slack absorbs float error in the product.
    bent = nodes - planner.on_demand_capacity > planner.max_spot_fraction * nodes + 1e-9
    policy = f"max spot fraction {planner.max_spot_fraction:g}, prefer {planner.prefer}"
    line = (
        f"{placement.total_nodes} nodes on {count} provider{'s' if count != 1 else ''}, "
        f"${placement.cost_per_hour:,.2f}/h, {placement.spot_nodes} on spot ({policy})"
    )
    if bent:
        line += (
            f"\nnote: only {planner.on_demand_capacity} nodes are on-demand, so {allowance} go to "
            "spot despite the cap: a job that cannot start is worse than one that breaks the policy"
        )
    return line + "\nfailover order: " + ", ".join(placement.infra_refs)


def _cmd_plan(args: argparse.Namespace) -> _Result:
    planner, placement = _plan(args)
    text = placement_table(placement) + "\n\n" + _plan_summary(planner, placement)
    return _Result(text, placement.to_dict())


# -- spec -------------------------------------------------------------------------------


def _cmd_spec(args: argparse.Namespace) -> _Result:
    _, placement = _plan(args)
    rendezvous = args.rendezvous
    if rendezvous is None:
        rendezvous = DEFAULT_RENDEZVOUS.format(name=args.name)
    options = LaunchOptions(run=args.run, procs_per_node=args.procs_per_node, rendezvous=rendezvous)
    parts = build_launch_parts(placement, args.name, options)
    world_size = parts[0].world_size
    rows = [("part", "provider", "nodes", "ranks", "infra", "spot")]
    for part in parts:
        last_rank = part.rank_offset + part.nodes * options.procs_per_node - 1
        rows.append(
            (
                part.part_name,
                part.provider.name,
                str(part.nodes),
                f"{part.rank_offset}-{last_rank}"
                if last_rank > part.rank_offset
                else str(part.rank_offset),
                part.engine_target,
                "yes" if part.provider.spot else "no",
            )
        )
    default_note = "" if args.rendezvous is not None else " (default; a launch needs a fresh one)"
    header = [
        f"job {args.name}: {placement.total_nodes} nodes in {len(parts)} "
        f"part{'s' if len(parts) != 1 else ''}, world size {world_size} "
        f"({options.procs_per_node} per node), ${placement.cost_per_hour:,.2f}/h",
        f"rendezvous {rendezvous}{default_note}",
        "",
        _table(rows, right=(2, 3)),
    ]
    blocks = ["\n".join(header)]
    for part in parts:
        spec_text = json.dumps(part.spec_dict, indent=2)
        blocks.append(
            f"{part.part_name} (rank offset {part.rank_offset}):\n"
            + "\n".join("  " + line for line in spec_text.splitlines())
        )
    data = {
        "job_name": args.name,
        "placement": placement.to_dict(),
        "world_size": world_size,
        "parts": [
            {
                "part_name": part.part_name,
                "provider": part.provider.name,
                "nodes": part.nodes,
                "rank_offset": part.rank_offset,
                "world_size": part.world_size,
                "infra": part.engine_target,
                "spec": part.spec_dict,
            }
            for part in parts
        ],
    }
    return _Result("\n\n".join(blocks), data)


# -- simulate ---------------------------------------------------------------------------


def _given(args: argparse.Namespace, name: str) -> bool:
    return getattr(args, name, None) is not None


def _scheduler(args: argparse.Namespace) -> ElasticScheduler:
    parameters = {
        option.field: getattr(args, option.field)
        for option in _SCHEDULER_OPTIONS
        if _given(args, option.field)
    }
    try:
        return ElasticScheduler(**parameters)
    except ElasticGridError as error:
        message = str(error)
        for option in _SCHEDULER_OPTIONS:  # name the option the user typed
            if message.startswith(option.field + " "):
                message = option.flag + message[len(option.field) :]
                break
        raise ElasticGridError(message) from None


def _cmd_simulate(args: argparse.Namespace) -> _Result:
    if args.state is not None:
        return _replay(args)
    if args.decision is not None:
        raise ElasticGridError("--decision picks a recorded decision; it needs --state FILE")
    if args.samples is None:
        raise ElasticGridError(
            "simulate needs --samples FILE (or --state FILE to replay a recorded decision)"
        )
    if args.deadline_in is None:
        for name, flag in (
            ("remaining_steps", "--remaining-steps"),
            ("remaining_tokens", "--remaining-tokens"),
        ):
            if _given(args, name):
                raise ElasticGridError(
                    f"{flag} only counts toward a deadline; it needs --deadline-in"
                )
    scheduler = _scheduler(args)
    window_size = check_integer(
        "--window-size",
        DEFAULT_WINDOW_SIZE if args.window_size is None else args.window_size,
        minimum=1,
    )
    if args.nodes is not None:
        check_integer("--nodes", args.nodes, minimum=1)
    for name, flag in (("now", "--now"), ("deadline_in", "--deadline-in")):
        if _given(args, name):
            check_number(flag, getattr(args, name), minimum=None)
    for name, flag in (
        ("remaining_steps", "--remaining-steps"),
        ("remaining_tokens", "--remaining-tokens"),
    ):
        if _given(args, name):
            check_number(flag, getattr(args, name))
    sample_file = _load_samples(args.samples)
    if args.timeline:
        return _timeline(args, scheduler, window_size, sample_file)
    return _single(args, scheduler, window_size, sample_file)


def _window_data(window: MetricsWindow, total: int) -> dict[str, Any]:
    kept = len(window)
    return {
        **window.signals().to_dict(),
        "size": window.size,
        "kept": kept,
        "total": total,
        "dropped": total - kept,
    }


def _window_note(window: MetricsWindow, total: int) -> str:
    kept = len(window)
    if kept < total:
        return f"window kept {kept} of {total} samples (--window-size {window.size})"
    noun = "sample" if total == 1 else "samples"
    return f"window kept all {total} {noun} (--window-size {window.size})"


def _clock_text(value: float | None, *, raw: bool = True) -> str:
    """A clock value; epoch-like values as UTC time (with the raw number unless ``raw=False``)."""
    if value is None:
        return "-"
    if value >= _EPOCH_LIKE:
        iso = clock_text(value)
        return f"{iso} ({value:.1f})" if raw else iso
    return number_text(value)


_KEY_WIDTH = 14
"""Key column of the ``simulate`` blocks, so the window and decision blocks line up."""


def _rows(pairs: Sequence[tuple[str, str]], indent: str = "  ") -> list[str]:
    width = max(_KEY_WIDTH, *(len(key) for key, _ in pairs))
    return [f"{indent}{key.ljust(width)}  {value}" for key, value in pairs]


def _signals_lines(signals: WindowSignals) -> list[str]:
    flags = [
        name for name, on in (("saturated", signals.saturated), ("stalled", signals.stalled)) if on
    ]
    queue = f"{signals.queue_fraction:.1%}" + (f"  ({', '.join(flags)})" if flags else "")
    return _rows(
        [
            ("nodes", str(signals.nodes)),
            ("mean step", seconds_text(signals.mean_step_s)),
            ("mean queue", seconds_text(signals.mean_queue_s)),
            ("mean active", seconds_text(signals.mean_active_s)),
            ("queue fraction", queue),
            ("throughput", f"{signals.throughput_tokens_per_s:,.1f} tokens/s"),
        ]
    )


def _decision_lines(decision: ScaleDecision) -> list[str]:
    pairs = [
        ("rule", rule_text(decision.rule, decision.thresholds)),
        ("held by", held_text(decision.to_dict())),
        ("reason", decision.reason),
        ("decided at", _clock_text(decision.decided_at)),
    ]
    if decision.deadline_at is not None:
        left = decision.time_left_s
        pairs.append(
            ("deadline", f"{_clock_text(decision.deadline_at)}, {seconds_text(left)} left")
        )
    pairs += _projection_rows(decision.projection)
    if decision.changed:
        pairs.append(("cooldown", f"starts now ({decision.action.value})"))
    else:
        pairs.append(("cooldown", _cooldown_text(decision.cooldown)))
    head = f"decision: {decision.action.value} {decision.current_nodes} -> {decision.target_nodes}"
    return [head, *_rows(pairs)]


def _projection_rows(projection: dict[str, Any] | None) -> list[tuple[str, str]]:
    """What the decision projected: demand vs capacity, finish times, the restart price."""
    if not projection:
        return []
    rows: list[tuple[str, str]] = []
    basis = projection.get("basis", "work")
    if "demand_per_s" in projection:
        demand = projection.get("demand_per_s")
        utilisation = projection.get("utilisation")
        rows.append(
            (
                "demand",
                f"{'unbounded' if demand is None else f'{number_text(demand)} {basis}/s'} against a "
                f"capacity of {number_text(projection.get('capacity_per_s'))} {basis}/s "
                f"({'unbounded' if utilisation is None else f'{utilisation:.0%}'}, "
                f"{projection.get('loop')} loop)",
            )
        )
    if projection.get("remaining") is not None and projection.get("current_finish_s") is not None:
        verdict = "meets" if projection.get("meets_deadline") else "misses"
        target_finish = projection.get("target_finish_s")
        target_text = "-" if target_finish is None else seconds_text(target_finish)
        rows.append(
            (
                "projection",
                f"{number_text(projection['remaining'])} {basis} take "
                f"{seconds_text(projection['current_finish_s'])} on {projection['current_nodes']} "
                f"nodes, {target_text} on {projection['target_nodes']}: {verdict} the deadline",
            )
        )
    if projection.get("target_nodes") != projection.get("current_nodes"):
        rows.append(
            (
                "restart",
                f"{seconds_text(projection.get('startup_s', 0.0))} of no progress, "
                f"{number_text(projection.get('restart_cost_node_s', 0.0))} node-seconds",
            )
        )
    if projection.get("gain") is not None:
        rows.append(
            (
                "pays off",
                f"gain {number_text(projection['gain'])} {projection['gain_unit']} against a "
                f"price of {number_text(projection['price'])}",
            )
        )
    return rows


def _deadline_at(base: float, args: argparse.Namespace) -> float | None:
    return None if args.deadline_in is None else base + args.deadline_in


def _single(
    args: argparse.Namespace,
    scheduler: ElasticScheduler,
    window_size: int,
    sample_file: _SampleFile,
) -> _Result:
    samples = sample_file.samples
    now = args.now if args.now is not None else sample_file.clock(0.0)[-1]
    current = args.nodes if args.nodes is not None else samples[-1].nodes
    state, record = ScaleState(job_name=SIMULATED_JOB).advance(
        scheduler,
        samples,
        current,
        now,
        window_size=window_size,
        deadline_at=_deadline_at(now, args),
        remaining_steps=args.remaining_steps,
        remaining_tokens=args.remaining_tokens,
    )
    window, decision = state.window, record.decision
    other_size = sum(1 for sample in samples if sample.nodes != current)
    note = _window_note(window, len(samples))
    if other_size:
        note += (
            f"; {other_size} left out for being measured at another size than "
            f"{'--nodes' if args.nodes is not None else 'the newest sample'} {current}"
        )
    lines = [note, *_signals_lines(window.signals())]
    lines += _decision_lines(decision)
    window_data = {**_window_data(window, len(samples)), "other_size": other_size}
    data = {"window": window_data, "decision": decision.to_dict()}
    return _Result("\n".join(lines), data)


def _timeline(
    args: argparse.Namespace,
    scheduler: ElasticScheduler,
    window_size: int,
    sample_file: _SampleFile,
) -> _Result:
    samples = sample_file.samples
    times = sample_file.clock(0.0 if args.now is None else args.now)
    deadline_at = _deadline_at(times[-1], args)
    # Work left after each sample: what is left after the newest, plus the samples to come.
    steps_after = [len(samples) - 1 - index for index in range(len(samples))]
    tokens_after: list[float] = []
    running = 0.0
    for sample in reversed(samples):
        tokens_after.append(running)
        running += sample.tokens
    tokens_after.reverse()

    state = ScaleState(job_name=SIMULATED_JOB)
    current = args.nodes if args.nodes is not None else samples[0].nodes
    entries: list[dict[str, Any]] = []
    rows = [("#", "step", "time", "window", "action", "nodes", "rule", "held by", "reason")]
    for index, (sample, now) in enumerate(zip(samples, times, strict=True)):
        if index > 0 and sample.nodes != samples[index - 1].nodes:
            current = sample.nodes  # the samples say the job was resized
        state, record = state.advance(
            scheduler,
            [sample],
            current,
            now,
            window_size=window_size,
            deadline_at=deadline_at,
            remaining_steps=None
            if args.remaining_steps is None
            else args.remaining_steps + steps_after[index],
            remaining_tokens=None
            if args.remaining_tokens is None
            else args.remaining_tokens + tokens_after[index],
        )
        window, decision = state.window, record.decision
        entries.append(
            {
                "sample": index + 1,
                "step": sample.step,
                "time": now,
                "window_samples": len(window),
                "decision": decision.to_dict(),
            }
        )
        rows.append(
            (
                str(index + 1),
                str(sample.step),
                _clock_text(now, raw=False),
                str(len(window)),
                decision.action.value,
                f"{decision.current_nodes} -> {decision.target_nodes}",
                decision.rule,
                held_text(decision.to_dict()),
                decision.reason,
            )
        )
        if decision.changed:
            current = decision.target_nodes
    changes = sum(1 for entry in entries if entry["decision"]["action"] != "hold")
    summary = (
        f"{len(entries)} decisions, {changes} scale change{'s' if changes != 1 else ''}; "
        f"final size {current}"
    )
    text = "\n".join(
        [
            _window_note(window, len(samples)),
            "",
            _table(rows, right=(0, 1, 3)),
            "",
            summary,
        ]
    )
    data = {"timeline": entries, "window": _window_data(window, len(samples))}
    return _Result(text, data)


# -- simulate --state: replay a recorded decision ---------------------------------------


def _unwrap_state(data: Any, path: str) -> dict[str, Any]:
    """The state dict: bare, or the one value of an Airflow export ``{"key": state}``."""
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
    return data


def _load_state(path: str) -> ScaleState:
    data = _unwrap_state(_load_json(path, "state file"), path)
    try:
        return ScaleState.from_dict(data)
    except ElasticGridError as error:
        raise ElasticGridError(f"state file {path}: {error}") from None
    except KeyError as error:
        raise ElasticGridError(
            f"state file {path}: the state is missing the field {error}"
        ) from None
    except (TypeError, ValueError, AttributeError) as error:
        raise ElasticGridError(f"state file {path}: the state is malformed ({error})") from None


def _load_record(entry: Any, where: str) -> DecisionRecord:
    try:
        return DecisionRecord.from_dict(entry)
    except ElasticGridError as error:
        raise ElasticGridError(f"{where}: {error}") from None
    except KeyError as error:
        raise ElasticGridError(f"{where}: the record is missing the field {error}") from None
    except (TypeError, ValueError, AttributeError) as error:
        raise ElasticGridError(f"{where}: the record is malformed ({error})") from None


def _differences(recorded: ScaleDecision, replayed: ScaleDecision) -> list[str]:
    before, after = recorded.to_dict(), replayed.to_dict()
    return [name for name in REPLAY_FIELDS if before[name] != after[name]]


def _brief(decision: ScaleDecision) -> list[str]:
    return [
        f"{decision.action.value} {decision.current_nodes} -> {decision.target_nodes}  "
        f"rule {decision.rule}  held by {held_text(decision.to_dict())}",
        decision.reason,
    ]


def _replay(args: argparse.Namespace) -> _Result:
    if args.samples is not None:
        raise ElasticGridError(
            "--state replays a recorded decision from its recorded window; "
            "it cannot be combined with --samples"
        )
    given = [flag for name, flag in _SIMULATE_ONLY_FOR_SAMPLES if _given(args, name)]
    if args.timeline:
        given.append("--timeline")
    if given:
        raise ElasticGridError(
            f"--state replays the recorded inputs; {given[0]} cannot be combined with it"
        )
    path = args.state
    state = _load_state(path)
    history = state.history
    if not history:
        raise ElasticGridError(f"state file {path} has no decisions in its history")
    count = len(history)
    ended = [isinstance(e, dict) and e.get("rule") == JOB_ENDED_RULE for e in history]
    requested = args.decision
    if requested is None:  # the newest decision: an end-of-job entry has none to replay
        requested = max((i for i, end in enumerate(ended) if not end), default=-1)
    if not -count <= requested < count:
        raise ElasticGridError(
            f"--decision {requested} is out of range: the history holds {count} "
            f"decision{'s' if count != 1 else ''} (0 to {count - 1}, or -{count} to -1)"
        )
    index = requested % count
    where = f"state file {path} history entry {index}"
    if ended[index]:
        raise ElasticGridError(f"{where} records the end of the job; it has no decision to replay")
    record = _load_record(history[index], where)
    try:
        replayed = record.replay()
    except ElasticGridError as error:
        raise ElasticGridError(f"{where}: {error}") from None
    recorded = record.decision
    differences = _differences(recorded, replayed)
    matches = not differences
    window = record.inputs.window
    lines = [
        f"job {state.job_name}: history entry {index} of {count} (0 = the oldest), "
        f"decided at {_clock_text(recorded.decided_at)}",
        *_rows(
            [
                ("window", f"{len(window)} samples (size {window.size})"),
                ("current nodes", str(record.inputs.current_nodes)),
                ("cooldown", _cooldown_text(record.inputs.cooldown)),
                ("deadline", _clock_text(record.inputs.deadline_at)),
            ]
        ),
        "recorded",
        *("  " + line for line in _brief(recorded)),
        "replayed",
        *("  " + line for line in _brief(replayed)),
    ]
    older_policy = recorded_by_older_policy(history[index])
    if older_policy:
        lines.append(
            "note: recorded by an older policy; the replay uses today's rules (its inputs "
            "have no capacity memory or recent recommendations)"
        )
    if matches:
        lines.append("match: the replay gives the recorded decision")
    else:
        lines.append(
            "MISMATCH: the replay differs in " + ", ".join(differences) + " (exit status 1)"
        )
    data = {
        "replay": {
            "state_file": path,
            "job_name": state.job_name,
            "index": index,
            "history_size": count,
            "matches": matches,
            "differences": differences,
            "older_policy": older_policy,
        },
        "window": _window_data(window, len(window)),
        "recorded": recorded.to_dict(),
        "decision": replayed.to_dict(),
    }
    return _Result("\n".join(lines), data, EXIT_OK if matches else EXIT_REPLAY_MISMATCH)


def _cooldown_text(clock: CooldownClock) -> str:
    if clock.last_change_at is None:
        return "no change yet"
    return f"last change ({clock.last_action}) at {_clock_text(clock.last_change_at)}"
