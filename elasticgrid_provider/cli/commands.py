"""The ``elasticgrid`` commands: read the inputs, let the pure core compute, build a Result.

A command returns a :class:`~elasticgrid_provider.cli.rendering.Result` (its text and
its JSON data, 0.1.0's keys) and never prints; ``simulate`` never reads the wall clock.
The rules: docs/cli.md ("simulate"), docs/step-samples.md.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

from elasticgrid_provider.cli.parsing import (
    DEFAULT_RENDEZVOUS,
    POLICY_FLAGS,
    SAMPLE_INPUTS,
    SIMULATE_ONLY_FOR_SAMPLES,
    given,
    load_grid,
    load_samples,
    load_state,
    option_flag,
    sample_clock,
    with_where,
)
from elasticgrid_provider.cli.rendering import (
    EXIT_OK,
    EXIT_REPLAY_MISMATCH,
    Result,
    decision_lines,
    plan_summary,
    providers_text,
    replay_text,
    signals_lines,
    spec_text,
    timeline_text,
    window_data,
    window_note,
)
from elasticgrid_provider.core.check import steps_left
from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.formatting import placement_table
from elasticgrid_provider.core.launch_spec import LaunchOptions, build_launch_parts
from elasticgrid_provider.core.placement import Placement
from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.policy.rules import EventRule
from elasticgrid_provider.core.samples import DEFAULT_WINDOW_SIZE, StepSample, screen_times
from elasticgrid_provider.core.schemas import json_schema
from elasticgrid_provider.core.state import (
    DecisionRecord,
    ScaleState,
    recorded_by_older_policy,
)
from elasticgrid_provider.core.validation import check_number

SIMULATED_JOB = "simulate"
"""The job name of the state ``simulate`` runs its transition on."""
REPLAY_FIELDS = ("action", "current_nodes", "target_nodes", "rule", "held_by", "reason")
"""What must agree for a replayed decision to match the recorded one."""


def run_providers(args: argparse.Namespace) -> Result:
    """``providers``: the grid (built-in or from ``--providers``)."""
    grid = load_grid(args.providers)
    source = "built-in grid" if args.providers is None else args.providers
    return Result(
        providers_text(grid, source), {"providers": [provider.model_dump() for provider in grid]}
    )


def _plan(args: argparse.Namespace) -> tuple[GridPlanner, Placement]:
    grid = load_grid(args.providers)
    planner = GridPlanner(grid, max_spot_fraction=args.max_spot_fraction, prefer=args.prefer)
    return planner, planner.plan(args.nodes)


def run_plan(args: argparse.Namespace) -> Result:
    """``plan``: place ``--nodes`` on the grid and cost it."""
    planner, placement = _plan(args)
    text = placement_table(placement) + "\n\n" + plan_summary(planner, placement)
    return Result(text, placement.model_dump())


def run_spec(args: argparse.Namespace) -> Result:
    """``spec``: plan, then render the iroh-tinker launch parts (one per provider)."""
    _, placement = _plan(args)
    default = args.rendezvous is None
    rendezvous = DEFAULT_RENDEZVOUS.format(name=args.name) if default else args.rendezvous
    options = LaunchOptions(run=args.run, procs_per_node=args.procs_per_node, rendezvous=rendezvous)
    parts = build_launch_parts(placement, args.name, options)
    text = spec_text(args.name, placement, parts, options.procs_per_node, rendezvous, default)
    data = {
        "job_name": args.name,
        "placement": placement.model_dump(),
        "world_size": parts[0].world_size,
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
    return Result(text, data)


def run_schema(args: argparse.Namespace) -> Result:
    """``schema state|decision``: the stored document's JSON Schema (always JSON)."""
    schema = json_schema(args.kind)
    return Result(json.dumps(schema, indent=2), schema)


def run_simulate(args: argparse.Namespace) -> Result:
    """``simulate``: one decision, a timeline of decisions, or a replay (``--state``)."""
    if args.state is not None:
        return _replay(args)
    if args.decision is not None:
        raise ElasticGridError("--decision picks a recorded decision; it needs --state FILE")
    if args.samples is None:
        raise ElasticGridError(
            "simulate needs --samples FILE (or --state FILE to replay a recorded decision)"
        )
    if args.deadline_in is None:
        for name in ("remaining_steps", "remaining_tokens", "total_steps"):
            if given(args, name):
                raise ElasticGridError(
                    f"{option_flag(name)} only counts toward a deadline; it needs --deadline-in"
                )
    policy = _policy(args)
    for name, _, minimum, _, _ in SAMPLE_INPUTS:
        if given(args, name):
            check_number(option_flag(name), getattr(args, name), minimum=minimum)
    samples, left_out = _screened(args, load_samples(args.samples))
    result = _timeline(args, policy, samples) if args.timeline else _single(args, policy, samples)
    if not left_out:
        return result
    return Result("\n".join([*left_out, result.text]), {**result.data, "left_out": left_out})


def _screened(
    args: argparse.Namespace, samples: tuple[StepSample, ...]
) -> tuple[tuple[StepSample, ...], list[str]]:
    """The samples, less those whose time is far from the simulated clock (the sensor's rule,
    :func:`screen_times`), with one sentence each; the clock is ``--now`` for one decision,
    else the last sample's time in file order."""
    start = 0.0 if args.now is None or not args.timeline else args.now
    end = args.now if args.now is not None and not args.timeline else None
    kept, left_out = screen_times(
        samples, end if end is not None else sample_clock(samples, start)[-1]
    )
    if not kept:
        raise ElasticGridError(
            f"samples file {args.samples} holds no sample near the simulated clock "
            f"({left_out[0].rstrip('.')})"
        )
    return tuple(kept), left_out


def _policy(args: argparse.Namespace) -> ScalePolicy:
    parameters = {field: getattr(args, field) for field in POLICY_FLAGS if given(args, field)}
    try:
        return ScalePolicy(**parameters)
    except ElasticGridError as error:
        message = str(error)  # named by the option the user typed
        field = next((name for name in POLICY_FLAGS if message.startswith(name + " ")), "")
        if field:
            message = POLICY_FLAGS[field] + message[len(field) :]
        raise ElasticGridError(message) from None


def _single(
    args: argparse.Namespace, policy: ScalePolicy, samples: tuple[StepSample, ...]
) -> Result:
    now = args.now if args.now is not None else sample_clock(samples, 0.0)[-1]
    current = args.nodes if args.nodes is not None else samples[-1].nodes
    deadline_at = None if args.deadline_in is None else now + args.deadline_in
    state, record = _advance(
        args, ScaleState(job_name=SIMULATED_JOB), policy, samples, current, now, deadline_at
    )
    window, decision = state.window, record.decision
    other_size = sum(1 for sample in samples if sample.nodes != current)
    note = window_note(window, len(samples))
    if other_size:
        note += (
            f"; {other_size} left out for being measured at another size than "
            f"{'--nodes' if args.nodes is not None else 'the newest sample'} {current}"
        )
    lines = [note, *signals_lines(window.signals()), *decision_lines(decision)]
    window_json = {**window_data(window, len(samples)), "other_size": other_size}
    return Result("\n".join(lines), {"window": window_json, "decision": decision.model_dump()})


def _advance(
    args: argparse.Namespace,
    state: ScaleState,
    policy: ScalePolicy,
    samples: Sequence[StepSample],
    current: int,
    now: float,
    deadline_at: float | None,
    *,
    steps_to_come: int = 0,
    tokens_to_come: float = 0.0,
) -> tuple[ScaleState, DecisionRecord]:
    """One check of the simulation, as the sensor's: observe the samples, count the work left
    (``--remaining-*`` plus what the samples still to come add, or ``--total-steps`` less the
    window's progress, :func:`steps_left`), decide, remember."""
    observed = state.observe(samples, current, now, args.window_size or DEFAULT_WINDOW_SIZE)
    given_steps = None if args.remaining_steps is None else args.remaining_steps + steps_to_come
    tokens = None if args.remaining_tokens is None else args.remaining_tokens + tokens_to_come
    record = observed.decide(
        policy,
        now,
        deadline_at=deadline_at,
        remaining_steps=steps_left(given_steps, args.total_steps, observed.window),
        remaining_tokens=tokens,
    )
    return observed.remember(record, now), record


def _timeline(
    args: argparse.Namespace, policy: ScalePolicy, samples: tuple[StepSample, ...]
) -> Result:
    times = sample_clock(samples, 0.0 if args.now is None else args.now)
    deadline_at = None if args.deadline_in is None else times[-1] + args.deadline_in
    # the tokens of the samples after each one (added up from the newest, as they arrive)
    tokens_after = list(accumulate(reversed([s.tokens for s in samples[1:]]), initial=0.0))[::-1]
    state = ScaleState(job_name=SIMULATED_JOB)
    current = args.nodes if args.nodes is not None else samples[0].nodes
    entries: list[dict[str, Any]] = []
    for index, (sample, now) in enumerate(zip(samples, times, strict=True)):
        if index > 0 and sample.nodes != samples[index - 1].nodes:
            current = sample.nodes  # the samples say the job was resized
        state, record = _advance(
            args,
            state,
            policy,
            [sample],
            current,
            now,
            deadline_at,
            steps_to_come=len(samples) - 1 - index,
            tokens_to_come=tokens_after[index],
        )
        window, decision = state.window, record.decision
        entries.append(
            {
                "sample": index + 1,
                "step": sample.step,
                "time": now,
                "window_samples": len(window),
                "decision": decision.model_dump(),
            }
        )
        if decision.changed:
            current = decision.target_nodes
    text = timeline_text(window_note(window, len(samples)), entries, current)
    return Result(text, {"timeline": entries, "window": window_data(window, len(samples))})


def _not_a_decision(entry: Any) -> str:
    """Why a history entry has no policy decision to replay ("" when it has one)."""
    rule = entry.get("rule") if isinstance(entry, dict) else None
    if rule == EventRule.JOB_ENDED:
        return "records the end of the job; it has no decision to replay"
    if rule == EventRule.INSTANCES:
        return "records a part's instances starting or ending; it has no decision to replay"
    if rule == EventRule.RECOVER:
        return (
            f"is a recovery ({entry.get('action')}), not a policy decision, "
            "so it cannot be replayed"
        )
    return ""


def _replay(args: argparse.Namespace) -> Result:
    if args.samples is not None:
        raise ElasticGridError(
            "--state replays a recorded decision from its recorded window; "
            "it cannot be combined with --samples"
        )
    refused = [flag for name, flag in SIMULATE_ONLY_FOR_SAMPLES if given(args, name)]
    if args.timeline:
        refused.append("--timeline")
    if refused:
        raise ElasticGridError(
            f"--state replays the recorded inputs; {refused[0]} cannot be combined with it"
        )
    path = args.state
    state = load_state(path)
    history = state.history
    if not history:
        raise ElasticGridError(f"state file {path} has no decisions in its history")
    count = len(history)
    skipped = [_not_a_decision(entry) for entry in history]
    requested = args.decision
    if requested is None:  # the newest decision: the end of the job or a recovery has none
        requested = max((i for i, why in enumerate(skipped) if not why), default=-1)
    if not -count <= requested < count:
        raise ElasticGridError(
            f"--decision {requested} is out of range: the history holds {count} "
            f"decision{'s' if count != 1 else ''} (0 to {count - 1}, or -{count} to -1)"
        )
    index = requested % count
    where = f"state file {path} history entry {index}"
    if skipped[index]:
        raise ElasticGridError(f"{where} {skipped[index]}")
    record = with_where(DecisionRecord.model_validate, history[index], where)
    replayed = with_where(DecisionRecord.replay, record, where)
    before, after = record.decision.model_dump(), replayed.model_dump()
    differences = [name for name in REPLAY_FIELDS if before[name] != after[name]]
    window = record.inputs.window
    replay = {
        "state_file": path,
        "job_name": state.job_name,
        "index": index,
        "history_size": count,
        "matches": not differences,
        "differences": differences,
        "older_policy": recorded_by_older_policy(history[index]),
    }
    data = {
        "replay": replay,
        "window": window_data(window, len(window)),
        "recorded": before,
        "decision": after,
    }
    text = replay_text(replay, record, replayed)
    return Result(text, data, EXIT_REPLAY_MISMATCH if differences else EXIT_OK)
