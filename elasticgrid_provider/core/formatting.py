"""Human-readable renderings shared by task logs, the CLI and the UI plugin.

One function per thing shown, so a placement or a decision reads the same in an
Airflow log, a terminal and the "Scale decisions" page. A decision on one line is
always :func:`decision_summary` (the sensor's log, ``simulate --state``, the UI;
:func:`decision_line` puts the time in front). Decision helpers take the record's
plain JSON and read optional fields with ``.get``, so older records still render.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from elasticgrid_provider.core.placement import Placement
from elasticgrid_provider.core.policy.parameters import RULE_THRESHOLDS
from elasticgrid_provider.core.policy.rules import HoldRule


def placement_table(placement: Placement) -> str:
    """A small aligned table: one row per provider share, then the totals."""
    rows = [("provider", "region", "spot", "nodes", "$/node/h", "$/h")]
    rows += [
        (
            share.provider.name,
            share.provider.region or "-",
            "yes" if share.provider.spot else "no",
            str(share.nodes),
            f"{share.provider.cost_per_node_hour:.2f}",
            f"{share.cost_per_hour:.2f}",
        )
        for share in placement.assignments
    ]
    cost = f"{placement.cost_per_hour:.2f}"
    rows.append(
        ("total", "", f"{placement.spot_fraction:.0%}", str(placement.total_nodes), "", cost)
    )
    table = aligned_table(rows, right=(3, 4, 5))
    fallback = placement.fallback_cost_per_hour
    if fallback is not None:  # spot_fallback: on_demand may cost more than the spot price
        table += f"\nif spot falls back to on-demand: {fallback:.2f} $/h"
    return table


def aligned_table(rows: Sequence[Sequence[str]], right: Sequence[int] = ()) -> str:
    """Aligned columns, two spaces apart; ``right`` lists the right-aligned columns."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(width) if column in right else cell.ljust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def rank_range(first: int, count: int) -> str:
    """Global ranks ``first`` to ``first + count - 1``: ``8-9``, or ``8`` for one rank."""
    last = first + count - 1
    return str(first) + (f"-{last}" if last > first else "")


def decision_line(record: dict[str, Any]) -> str:
    """One line per decision for a trail (the demo's): the UTC time, then :func:`decision_summary`."""
    when = record.get("decided_at_iso") or iso_time(record.get("decided_at"))
    return f"{when}  {decision_summary(record)}"


def bounded_or_none(value: Any) -> Any:
    """``None`` for a float that stands for infinity (the scheduler caps unbounded figures,
    such as a finish that never comes, at ``sys.float_info.max``); any other value as is."""
    if isinstance(value, float) and (not math.isfinite(value) or abs(value) >= sys.float_info.max):
        return None
    return value


def iso_time(epoch: Any) -> str | None:
    """An epoch time as ISO 8601 in UTC to the second; None for a missing or bad value."""
    if isinstance(epoch, bool) or not isinstance(epoch, (int, float)) or not math.isfinite(epoch):
        return None
    try:
        return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):  # beyond the calendar (e.g. 1.8e308)
        return None


def rounded(value: Any, digits: int = 3) -> Any:
    """``value`` with every float rounded to ``digits`` places (through dicts and lists)."""
    if isinstance(value, float):
        return round(value, digits) if math.isfinite(value) else value
    if isinstance(value, dict):
        return {key: rounded(item, digits) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(item, digits) for item in value]
    return value


def number_text(value: Any) -> str:
    """A number for people: integers as is, floats to 3 decimals below 1, else 2 (no e-notation);
    ``-`` for a missing value, ``unbounded`` for the scheduler's stand-in for infinity."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-" if value is None else str(value)
    if bounded_or_none(value) is None:
        return "unbounded"
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    text = f"{value:.3f}" if abs(value) < 1 else f"{value:.2f}"
    return text.rstrip("0").rstrip(".")


def seconds_text(value: Any) -> str:
    """A duration: ``90s``, ``1.25s``; ``-`` when missing, ``never`` when unbounded."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "never" if bounded_or_none(float(value)) is None else f"{number_text(value)}s"
    return number_text(value)


def clock_text(epoch: Any) -> str:
    """An epoch time as ``2026-01-01T02:46:40Z`` (UTC, to the second); ``-`` when missing."""
    iso = iso_time(epoch)
    return "-" if iso is None else iso.replace("+00:00", "Z")


def rule_text(rule: str, thresholds: dict[str, Any] | None) -> str:
    """A rule with the thresholds it compares against, e.g. ``cooldown (cooldown_s=300)``."""
    limits = thresholds or {}
    parts = [
        f"{name}={number_text(limits[name])}"
        for name in RULE_THRESHOLDS.get(rule, ())
        if limits.get(name) is not None
    ]
    return f"{rule} ({', '.join(parts)})" if parts else rule


def held_text(record: dict[str, Any]) -> str:
    """The rules that held a decision back, with their thresholds; ``-`` when none. A hold by
    the shared grid reads as its capacity (``grid capacity (0 free; 'b' holds 4 on local)``),
    from the decision's recorded ``grid``."""
    from elasticgrid_provider.core.policy.grid import grid_capacity_text

    thresholds = record.get("thresholds")
    holds = [
        grid_capacity_text(record.get("grid"), record.get("current_nodes"))
        if hold.get("rule") == HoldRule.CAPACITY
        else rule_text(str(hold.get("rule")), thresholds)
        for hold in record.get("held_by") or ()
    ]
    return ", ".join(holds) or "-"


def decision_summary(record: dict[str, Any]) -> str:
    """The one decision formatter: action, sizes, rule and holds with thresholds, reason.

    Example: ``hold 16 -> 16; rule queue_bound (target_queue_fraction=0.2,
    scale_up_factor=2); held by cooldown (cooldown_s=300, scale_down_cooldown_s=300);
    <reason>``. The sensor logs it, the CLI and the UI show it.
    """
    text = (
        f"{record.get('action')} {record.get('current_nodes')} -> {record.get('target_nodes')}; "
        f"rule {rule_text(str(record.get('rule')), record.get('thresholds'))}"
    )
    if record.get("held_by"):
        text += f"; held by {held_text(record)}"
    return f"{text}; {record.get('reason')}"
