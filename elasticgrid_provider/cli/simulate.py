"""``simulate``: decide from step samples as the sensor would, or replay a recorded decision.

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
Entries that hold no policy decision (the end of the job, a recovery) are
skipped by the default and refused, in one sentence, when ``--decision`` names one.

Options are checked before any file is read, naming the flag typed
(``--cooldown``, not ``cooldown_s``); options that make no sense together are
refused in one sentence.
"""

from __future__ import annotations

from argparse import Namespace
from typing import Any

from elasticgrid_provider.cli.inputs import SampleFile, load_record, load_samples, load_state
from elasticgrid_provider.cli.parsing import SCHEDULER_OPTIONS, SIMULATE_ONLY_FOR_SAMPLES, given
from elasticgrid_provider.cli.rendering import (
    EXIT_OK,
    EXIT_REPLAY_MISMATCH,
    Result,
    decision_lines,
    replay_text,
    signals_lines,
    timeline_row,
    timeline_text,
    window_data,
    window_note,
)
from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.recovery import RECOVER_RULE
from elasticgrid_provider.core.samples import DEFAULT_WINDOW_SIZE
from elasticgrid_provider.core.scheduler import ElasticScheduler, ScaleDecision
from elasticgrid_provider.core.state import JOB_ENDED_RULE, ScaleState, recorded_by_older_policy
from elasticgrid_provider.core.validation import check_integer, check_number

SIMULATED_JOB = "simulate"
"""The job name of the state ``simulate`` runs its transition on."""
REPLAY_FIELDS = ("action", "current_nodes", "target_nodes", "rule", "held_by", "reason")
"""What must agree for a replayed decision to match the recorded one."""
_WORK_LEFT = (("remaining_steps", "--remaining-steps"), ("remaining_tokens", "--remaining-tokens"))


def run_simulate(args: Namespace) -> Result:
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
        for name, flag in _WORK_LEFT:
            if given(args, name):
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
        if given(args, name):
            check_number(flag, getattr(args, name), minimum=None)
    for name, flag in _WORK_LEFT:
        if given(args, name):
            check_number(flag, getattr(args, name))
    sample_file = load_samples(args.samples)
    if args.timeline:
        return _timeline(args, scheduler, window_size, sample_file)
    return _single(args, scheduler, window_size, sample_file)


def _scheduler(args: Namespace) -> ElasticScheduler:
    parameters = {
        option.field: getattr(args, option.field)
        for option in SCHEDULER_OPTIONS
        if given(args, option.field)
    }
    try:
        return ElasticScheduler(**parameters)
    except ElasticGridError as error:
        message = str(error)
        for option in SCHEDULER_OPTIONS:  # name the option the user typed
            if message.startswith(option.field + " "):
                message = option.flag + message[len(option.field) :]
                break
        raise ElasticGridError(message) from None


def _deadline_at(base: float, args: Namespace) -> float | None:
    return None if args.deadline_in is None else base + args.deadline_in


def _single(args: Namespace, scheduler: ElasticScheduler, size: int, file: SampleFile) -> Result:
    samples = file.samples
    now = args.now if args.now is not None else file.clock(0.0)[-1]
    current = args.nodes if args.nodes is not None else samples[-1].nodes
    state, record = ScaleState(job_name=SIMULATED_JOB).advance(
        scheduler,
        samples,
        current,
        now,
        window_size=size,
        deadline_at=_deadline_at(now, args),
        remaining_steps=args.remaining_steps,
        remaining_tokens=args.remaining_tokens,
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
    return Result("\n".join(lines), {"window": window_json, "decision": decision.to_dict()})


def _timeline(args: Namespace, scheduler: ElasticScheduler, size: int, file: SampleFile) -> Result:
    samples = file.samples
    times = file.clock(0.0 if args.now is None else args.now)
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
    rows: list[tuple[str, ...]] = []
    for index, (sample, now) in enumerate(zip(samples, times, strict=True)):
        if index > 0 and sample.nodes != samples[index - 1].nodes:
            current = sample.nodes  # the samples say the job was resized
        state, record = state.advance(
            scheduler,
            [sample],
            current,
            now,
            window_size=size,
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
        rows.append(timeline_row(index + 1, sample.step, now, len(window), decision))
        if decision.changed:
            current = decision.target_nodes
    changes = sum(1 for entry in entries if entry["decision"]["action"] != "hold")
    text = timeline_text(window_note(window, len(samples)), rows, changes, current)
    return Result(text, {"timeline": entries, "window": window_data(window, len(samples))})


# -- simulate --state: replay a recorded decision ---------------------------------------


def _differences(recorded: ScaleDecision, replayed: ScaleDecision) -> list[str]:
    before, after = recorded.to_dict(), replayed.to_dict()
    return [name for name in REPLAY_FIELDS if before[name] != after[name]]


def _not_a_decision(entry: Any) -> str:
    """Why a history entry has no policy decision to replay ("" when it has one)."""
    rule = entry.get("rule") if isinstance(entry, dict) else None
    if rule == JOB_ENDED_RULE:
        return "records the end of the job; it has no decision to replay"
    if rule == RECOVER_RULE:
        return (
            f"is a recovery ({entry.get('action')}), not a policy decision, "
            "so it cannot be replayed"
        )
    return ""


def _replay(args: Namespace) -> Result:
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
    record = load_record(history[index], where)
    try:
        replayed = record.replay()
    except ElasticGridError as error:
        raise ElasticGridError(f"{where}: {error}") from None
    recorded = record.decision
    differences = _differences(recorded, replayed)
    older_policy = recorded_by_older_policy(history[index])
    window = record.inputs.window
    text = replay_text(state.job_name, index, count, record, replayed, differences, older_policy)
    data = {
        "replay": {
            "state_file": path,
            "job_name": state.job_name,
            "index": index,
            "history_size": count,
            "matches": not differences,
            "differences": differences,
            "older_policy": older_policy,
        },
        "window": window_data(window, len(window)),
        "recorded": recorded.to_dict(),
        "decision": replayed.to_dict(),
    }
    return Result(text, data, EXIT_REPLAY_MISMATCH if differences else EXIT_OK)
