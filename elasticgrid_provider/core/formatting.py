"""Human-readable renderings shared by task logs and the CLI.

One function per thing shown, so a placement or a decision reads the same in
an Airflow log and in a terminal.
"""

from __future__ import annotations

from typing import Any

from elasticgrid_provider.core.placement import Placement


def placement_table(placement: Placement) -> str:
    """A small aligned table: one row per provider share, then the totals."""
    rows = [("provider", "region", "spot", "nodes", "$/node/h", "$/h")]
    for share in placement.assignments:
        provider = share.provider
        rows.append(
            (
                provider.name,
                provider.region or "-",
                "yes" if provider.spot else "no",
                str(share.nodes),
                f"{provider.cost_per_node_hour:.2f}",
                f"{share.cost_per_hour:.2f}",
            )
        )
    rows.append(
        (
            "total",
            "",
            f"{placement.spot_fraction:.0%}",
            str(placement.total_nodes),
            "",
            f"{placement.cost_per_hour:.2f}",
        )
    )
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.ljust(width) if column < 3 else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def decision_line(record: dict[str, Any]) -> str:
    """One line per decision: time, action, sizes and reason (for trails and logs)."""
    when = record.get("decided_at_iso") or record.get("decided_at")
    return (
        f"{when}  {record['action']:<10}  {record['current_nodes']} -> {record['target_nodes']}  "
        f"{record['reason']}"
    )
