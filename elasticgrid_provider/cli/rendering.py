"""What the ``elasticgrid`` command prints: text tables and blocks, JSON, errors.

Pure presentation: a command builds a :class:`Result` with its text and its JSON-ready
data, and :func:`emit` prints one of them. Decisions (one line: ``decision_summary``, as
in the task log and the UI), numbers, durations, times, rules and holds go through
:mod:`~elasticgrid_provider.core.formatting`. Tables are aligned columns; key/value
blocks share one key width so they line up. An error is one line, exit status 2.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from elasticgrid_provider.core.formatting import (
    aligned_table,
    clock_text,
    decision_summary,
    held_text,
    number_text,
    rank_range,
    rule_text,
    seconds_text,
)
from elasticgrid_provider.core.launch_spec import LaunchPart
from elasticgrid_provider.core.placement import Placement
from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.policy.decision import CooldownClock, ScaleDecision
from elasticgrid_provider.core.providers import Provider, launch_refusal
from elasticgrid_provider.core.samples import MetricsWindow, WindowSignals
from elasticgrid_provider.core.state import DecisionRecord

EXIT_OK = 0
EXIT_REPLAY_MISMATCH = 1
EXIT_FAILED = 1  # a command that could not finish (a stop cut short)
EXIT_USAGE = 2

_EPOCH_LIKE = 1e9
"""Clock values from here on are shown as UTC times too (from 2001-09-09 on)."""
_KEY_WIDTH = 14
"""Key column of the ``simulate`` blocks, so the window and decision blocks line up."""


@dataclass(frozen=True)
class Result:
    """What a command prints (text or JSON) and its exit status."""

    text: str
    data: dict[str, Any]
    code: int = EXIT_OK


def emit(result: Result, want_json: bool) -> int:
    """Print ``result`` as JSON or text; return its exit status."""
    try:
        print(json.dumps(result.data, indent=2, allow_nan=False) if want_json else result.text)
        sys.stdout.flush()
    except BrokenPipeError:  # `elasticgrid ... | head`: stop quietly
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return result.code


def fail(message: str, want_json: bool, code: int = EXIT_USAGE) -> int:
    """Print an error as one line; return ``code`` (a user error's 2 by default)."""
    line = " ".join(message.split())  # one line, whatever the message holds
    if want_json:
        print(json.dumps({"error": line}))
    else:
        print(f"error: {line}", file=sys.stderr)
    return code


def key_rows(pairs: Sequence[tuple[str, str]]) -> list[str]:
    """A key/value block, keys padded to a shared width."""
    width = max(_KEY_WIDTH, *(len(key) for key, _ in pairs))
    return [f"  {key.ljust(width)}  {value}" for key, value in pairs]


def time_text(value: float | None, *, raw: bool = True) -> str:
    """A clock value; epoch-like values as UTC time (with the raw number unless ``raw=False``)."""
    if value is None:
        return "-"
    if value >= _EPOCH_LIKE:
        iso = clock_text(value)
        return f"{iso} ({value:.1f})" if raw else iso
    return number_text(value)


def cooldown_text(clock: CooldownClock) -> str:
    """When the last change was, or that there was none."""
    if clock.last_change_at is None:
        return "no change yet"
    return f"last change ({clock.last_action}) at {time_text(clock.last_change_at)}"


def providers_text(grid: Sequence[Provider], source: str) -> str:
    """The grid as a table, then its capacity on-demand and on spot."""
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
                provider.engine_name + (" (plan only)" if launch_refusal(provider) else ""),
            )
        )
    capacity = sum(provider.max_nodes for provider in grid)
    on_demand = sum(provider.max_nodes for provider in grid if not provider.spot)
    summary = (
        f"{len(grid)} providers ({source}): capacity {capacity} nodes, "
        f"{on_demand} on-demand and {capacity - on_demand} spot"
    )
    plan_only = [provider.name for provider in grid if launch_refusal(provider)]
    if plan_only:
        summary += (
            f"\nplan only: {', '.join(plan_only)} (no elasticgrid engine for their cloud yet; "
            "iroh-tinker's own cloud engines are never launched)"
        )
    return aligned_table(rows, right=(2, 3)) + "\n\n" + summary


def plan_summary(planner: GridPlanner, placement: Placement) -> str:
    """Sizes, cost and spot share; a note when the spot cap had to bend; failover order."""
    count = len(placement.assignments)
    if count == 0:
        return "0 nodes: an empty placement, nothing to run"
    nodes = placement.total_nodes
    policy = f"max spot fraction {planner.max_spot_fraction:g}, prefer {planner.prefer}"
    line = (
        f"{nodes} nodes on {count} provider{'s' if count != 1 else ''}, "
        f"${placement.cost_per_hour:,.2f}/h, {placement.spot_nodes} on spot ({policy})"
    )
    # the spot nodes the job must use exceed floor(fraction * N) (slack for float error)
    if nodes - planner.on_demand_capacity > planner.max_spot_fraction * nodes + 1e-9:
        line += (
            f"\nnote: only {planner.on_demand_capacity} nodes are on-demand, so "
            f"{planner.spot_allowance(nodes)} go to spot despite the cap: a job that cannot "
            "start is worse than one that breaks the policy"
        )
    line += "".join(f"\nnote: {refusal}" for refusal in placement.launch_refusals)
    return line + "\nfailover order: " + ", ".join(placement.infra_refs)


def spec_text(
    job_name: str,
    placement: Placement,
    parts: Sequence[LaunchPart],
    procs_per_node: int,
    rendezvous: str,
    default_rendezvous: bool,
) -> str:
    """The launch parts as a table, then each part's iroh-tinker spec."""
    rows = [("part", "provider", "nodes", "ranks", "infra", "spot")]
    for part in parts:
        ranks = rank_range(part.rank_offset, part.nodes * procs_per_node)
        rows.append(
            (
                part.part_name,
                part.provider.name,
                str(part.nodes),
                ranks,
                part.engine_target,
                "yes" if part.provider.spot else "no",
            )
        )
    default_note = " (default; a launch needs a fresh one)" if default_rendezvous else ""
    header = [
        f"job {job_name}: {placement.total_nodes} nodes in {len(parts)} "
        f"part{'s' if len(parts) != 1 else ''}, world size {parts[0].world_size} "
        f"({procs_per_node} per node), ${placement.cost_per_hour:,.2f}/h",
        f"rendezvous {rendezvous}{default_note}",
        "",
        aligned_table(rows, right=(2, 3)),
    ]
    blocks = ["\n".join(header)]
    for part in parts:
        spec_json = textwrap.indent(json.dumps(part.spec_dict, indent=2), "  ")
        blocks.append(f"{part.part_name} (rank offset {part.rank_offset}):\n{spec_json}")
    return "\n\n".join(blocks)


def window_data(window: MetricsWindow, total: int) -> dict[str, Any]:
    """The window's signals plus how many of ``total`` samples it kept."""
    kept = len(window)
    return {
        **window.signals().model_dump(),
        "size": window.size,
        "kept": kept,
        "total": total,
        "dropped": total - kept,
    }


def window_note(window: MetricsWindow, total: int) -> str:
    """How many samples the window kept, and its size."""
    kept = len(window)
    if kept < total:
        return f"window kept {kept} of {total} samples (--window-size {window.size})"
    noun = "sample" if total == 1 else "samples"
    return f"window kept all {total} {noun} (--window-size {window.size})"


def signals_lines(signals: WindowSignals) -> list[str]:
    """The window's signals as a key/value block."""
    flags = [name for name in ("saturated", "stalled") if getattr(signals, name)]
    queue = f"{signals.queue_fraction:.1%}" + (f"  ({', '.join(flags)})" if flags else "")
    return key_rows(
        [
            ("nodes", str(signals.nodes)),
            ("mean step", seconds_text(signals.mean_step_s)),
            ("mean queue", seconds_text(signals.mean_queue_s)),
            ("mean active", seconds_text(signals.mean_active_s)),
            ("queue fraction", queue),
            ("throughput", f"{signals.throughput_tokens_per_s:,.1f} tokens/s"),
        ]
    )


def decision_lines(decision: ScaleDecision) -> list[str]:
    """A decision in full: rule, holds, reason, times, projection, cooldown and conditions."""
    pairs = [
        ("rule", rule_text(decision.rule, decision.thresholds)),
        ("held by", held_text(decision.model_dump())),
        ("reason", decision.reason),
        ("decided at", time_text(decision.decided_at)),
    ]
    if decision.deadline_at is not None:
        left = decision.time_left_s
        pairs.append(("deadline", f"{time_text(decision.deadline_at)}, {seconds_text(left)} left"))
    if decision.preempted_by is not None:
        pairs.append(("preempted by", f"job {decision.preempted_by!r}"))
    if decision.grid is not None:
        pairs.append(("shared grid", decision.grid.text()))
    pairs += projection_rows(decision.projection)
    starts = f"starts now ({decision.action.value})"
    pairs.append(("cooldown", starts if decision.changed else cooldown_text(decision.cooldown)))
    pairs += [
        (condition.type, f"{condition.status} ({condition.reason}): {condition.message}")
        for condition in decision.conditions
    ] or [("conditions", "not recorded (the decision predates them)")]
    head = f"decision: {decision.action.value} {decision.current_nodes} -> {decision.target_nodes}"
    return [head, *key_rows(pairs)]


def projection_rows(projection: dict[str, Any] | None) -> list[tuple[str, str]]:
    """What the decision projected: demand vs capacity, finish times, the restart price."""
    p = projection or {}
    basis = p.get("basis", "work")
    rows: list[tuple[str, str]] = []
    if "demand_per_s" in p:
        unit = p.get("demand_basis", basis)
        demand, share = p.get("demand_per_s"), p.get("utilisation")
        demand_text = "unbounded" if demand is None else f"{number_text(demand)} {unit}/s"
        share_text = "unbounded" if share is None else f"{share:.0%}"
        capacity = f"{number_text(p.get('capacity_per_s'))} {unit}/s"
        loop = f"({share_text}, {p.get('loop')} loop)"
        rows.append(("demand", f"{demand_text} against a capacity of {capacity} {loop}"))
    if p.get("remaining") is not None and p.get("current_finish_s") is not None:
        verdict = "meets" if p.get("meets_deadline") else "misses"
        target = seconds_text(p.get("target_finish_s"))
        rows.append(
            (
                "projection",
                f"{number_text(p['remaining'])} {basis} take {seconds_text(p['current_finish_s'])} "
                f"on {p['current_nodes']} nodes, {target} on {p['target_nodes']}: "
                f"{verdict} the deadline",
            )
        )
    if p and p.get("target_nodes") != p.get("current_nodes"):
        price = number_text(p.get("restart_cost_node_s", 0.0))
        no_progress = seconds_text(p.get("startup_s", 0.0))
        rows.append(("restart", f"{no_progress} of no progress, {price} node-seconds"))
    if p.get("gain") is not None:
        gain = f"{number_text(p['gain'])} {p['gain_unit']}"
        rows.append(("pays off", f"gain {gain} against a price of {number_text(p['price'])}"))
    return rows


def timeline_text(note: str, entries: Sequence[dict[str, Any]], final: int) -> str:
    """The window note, a table of the timeline's entries and a one-line summary."""
    rows = [("#", "step", "time", "window", "action", "nodes", "rule", "held by", "reason")]
    for entry in entries:
        decision = entry["decision"]
        rows.append(
            (
                str(entry["sample"]),
                str(entry["step"]),
                time_text(entry["time"], raw=False),
                str(entry["window_samples"]),
                decision["action"],
                f"{decision['current_nodes']} -> {decision['target_nodes']}",
                decision["rule"],
                held_text(decision),
                decision["reason"],
            )
        )
    changes = sum(1 for entry in entries if entry["decision"]["action"] != "hold")
    summary = (
        f"{len(entries)} decisions, {changes} scale change{'s' if changes != 1 else ''}; "
        f"final size {final}"
    )
    return "\n".join([note, "", aligned_table(rows, right=(0, 1, 3)), "", summary])


def replay_text(replay: dict[str, Any], record: DecisionRecord, replayed: ScaleDecision) -> str:
    """``simulate --state``: the inputs, both decisions and whether they match (JSON ``replay``)."""
    recorded = record.decision
    window = record.inputs.window
    lines = [
        f"job {replay['job_name']}: history entry {replay['index']} of "
        f"{replay['history_size']} (0 = the oldest), decided at {time_text(recorded.decided_at)}",
        *key_rows(
            [
                ("window", f"{len(window)} samples (size {window.size})"),
                ("current nodes", str(record.inputs.current_nodes)),
                ("cooldown", cooldown_text(record.inputs.cooldown)),
                ("deadline", time_text(record.inputs.deadline_at)),
                *([("shared grid", record.inputs.grid.text())] if record.inputs.grid else []),
            ]
        ),
        "recorded",
        "  " + decision_summary(recorded.model_dump()),
        *([f"  preempted by job {recorded.preempted_by!r}"] if recorded.preempted_by else []),
        "replayed",
        "  " + decision_summary(replayed.model_dump()),
    ]
    if replay["older_policy"]:
        lines.append(
            "note: recorded by an older policy; the replay uses today's rules (its inputs "
            "have no capacity memory or recent recommendations)"
        )
    if replay["differences"]:
        differences = ", ".join(replay["differences"])
        lines.append(f"MISMATCH: the replay differs in {differences} (exit status 1)")
    else:
        lines.append("match: the replay gives the recorded decision")
    return "\n".join(lines)
