"""HTML for the "Scale decisions" pages: escaped values, inline CSS and SVG, no scripts.

The pages run in the Airflow UI's same-origin iframe with the viewer's API rights
(SPEC 6.4), so every value, attributes included, goes through :func:`esc`
(``html.escape`` with quotes); only :class:`Markup` built here from escaped values goes
in as it is. Nothing is loaded from elsewhere, the app's Content-Security-Policy
forbids scripts, and links to Airflow's own pages open in the top window.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable
from typing import Any

from elasticgrid_provider.core.formatting import number_text
from elasticgrid_provider.plugins.links import job_page_path

# a table's columns: header -> the row's key, or a function of the row (:func:`_table`)
Columns = dict[str, str | Callable[[dict[str, Any]], Any]]

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:16px;color:#1d2329}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:20px 0 6px}
table{border-collapse:collapse;margin:4px 0}th,td{border-bottom:1px solid #dde2e6;
padding:4px 8px;text-align:left;vertical-align:top}th{background:#f3f5f7;font-weight:600}
.muted{color:#5f6b76}.ok{color:#1c7c3a}.no{color:#a4262c}.error{color:#a4262c;font-weight:600}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 14px;margin:4px 0}
dt{font-weight:600}dd{margin:0}tr.highlight{background:#fff6d6}code{font-size:13px}
tr.recovery{background:#fdecea}
"""


class Markup(str):
    """HTML made here from escaped values: :func:`esc` leaves it as it is (no double escaping)."""


def esc(value: Any) -> Markup:
    """``value`` as text, HTML-escaped (quotes too, so it is safe in attributes); markup as is."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape("-" if value is None else str(value), quote=True))


def _table(rows: Iterable[dict[str, Any]], columns: Columns, marked=None) -> str:
    """A table of escaped cells, a column per ``columns`` entry; ``marked``: CSS classes by row."""
    head = "".join(f"<th>{esc(header)}</th>" for header in columns)
    body = []
    for index, row in enumerate(rows):
        cells = (cell(row) if callable(cell) else row[cell] for cell in columns.values())
        css = (marked or {}).get(index)
        attribute = f' class="{esc(css)}"' if css else ""
        body.append(f"<tr{attribute}>" + "".join(f"<td>{esc(c)}</td>" for c in cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _section(title: str, body: str) -> str:
    return f"<h2>{esc(title)}</h2>{body}"


def _page(title: str, body: str) -> str:
    """A whole page, headed by its title."""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{STYLE}</style></head>"
        f"<body><h1>{esc(title)}</h1>{body}</body></html>"
    )


def _link(href: str | None, text: Any, top: bool = False) -> Markup:
    if not href:
        return esc(text)
    target = ' target="_top"' if top else ""
    return Markup(f'<a href="{esc(href)}"{target}>{esc(text)}</a>')


def _lines(values: Iterable[Any]) -> Markup:
    return Markup("<br>".join(esc(value) for value in values))


def _arrow(before: Any, after: Any) -> Markup:
    return Markup(f"{esc(before)} -&gt; {esc(after)}")


def _money(value: Any) -> str:
    return "-" if value is None else f"${float(value):.2f}/h"


ACTION: Columns = {
    "action": lambda row: Markup(f"<strong>{esc(row['action'])}</strong>"),
    "from -> to": lambda row: _arrow(row["from_nodes"], row["to_nodes"]),
}
SIGNALS: Columns = {"signal": "name", "current": "current", "target": "target"}
CONDITIONS: Columns = {
    "type": "type",
    "status": lambda c: Markup(
        f'<span class="{"ok" if c["status"] else "no"}">{esc(c["status"])}</span>'
    ),
    "message": "message",
}
RECOVERIES: Columns = {
    "time": "decided_at_iso",
    **ACTION,
    "lost part": lambda row: _lines(row["lost"]),
    "quarantine": lambda row: _lines(row["quarantine"]) or "-",
    "relaunched on": lambda row: row["relaunched_on"] or "-",
}
TIMELINE: Columns = {
    "time": "headline",
    **ACTION,
    "rule": "rule",
    "held back by": "held_by",
    "reason": "reason",
    "cost/h": lambda row: _arrow(
        _money(row["cost_per_hour_before"]), _money(row["cost_per_hour_after"])
    ),
    "made by": lambda row: _lines(
        _link(row["links"][kind], row[f"{kind}_id"], top=True) for kind in ("run", "task")
    ),
}


def jobs_page(rows: list[dict[str, Any]], prefix: str) -> str:
    """The Browse > Scale decisions list."""
    columns: Columns = {
        "job": lambda row: _link(prefix + job_page_path(row["job_name"]), row["job_name"]),
        "DAG": lambda row: ", ".join(row["dag_ids"]) or "-",
        "current size": "current_nodes",
        "last decision": "last_decision",
        "when": "last_decision_at_iso",
        "cost per hour": lambda row: _money(row["cost_per_hour"]),
        "status": lambda row: Markup(
            esc(row["status"])
            + (f'<div class="error">{esc(row["error"])}</div>' if row["error"] else "")
        ),
    }
    empty = '<p class="muted">No job you may see has a scale decision yet.</p>'
    return _page("Scale decisions", _table(rows, columns) if rows else empty)


def chart_svg(points: list[dict[str, Any]], width: int = 720, panel_height: int = 70) -> str:
    """Three stacked step charts over time: nodes, queue fraction, cost per hour."""
    if not points:
        return '<p class="muted">No decisions to chart yet.</p>'
    start = min(p["at"] for p in points)
    span = (max(p["at"] for p in points) - start) or 1.0
    left, right, gap = 90, 10, 18
    plot_width = width - left - right
    panels = (
        ("nodes", "nodes", "#1f6feb"),
        ("queue_fraction", "queue fraction", "#b35900"),
        ("cost_per_hour", "cost $/h", "#1c7c3a"),
    )
    parts = []
    for index, (key, label, colour) in enumerate(panels):
        top = index * (panel_height + gap) + 4
        values = [p.get(key) for p in points]
        high = max((float(v) for v in values if isinstance(v, (int, float))), default=1.0)
        high = high if high > 0 else 1.0
        coordinates: list[str] = []
        dots = []
        for point, value in zip(points, values, strict=True):
            if not isinstance(value, (int, float)):
                continue
            x = left + (point["at"] - start) / span * plot_width
            y = top + panel_height - float(value) / high * panel_height
            if coordinates:  # a step: hold the previous value until this time
                coordinates.append(f"{x:.1f},{coordinates[-1].split(',')[1]}")
            coordinates.append(f"{x:.1f},{y:.1f}")
            dots.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}">'
                f"<title>{esc(point['at_iso'])}: {esc(number_text(value))}</title></circle>"
            )
        parts.append(
            f'<text x="4" y="{top + 12}" font-size="12">{esc(label)}</text>'
            + _note(4, top + 28, f"max {number_text(high)}")
            + f'<rect x="{left}" y="{top}" width="{plot_width}" height="{panel_height}" '
            'fill="none" stroke="#dde2e6"/>'
        )
        if coordinates:
            parts.append(
                f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
                f'points="{" ".join(coordinates)}"/>{"".join(dots)}'
            )
    total = 3 * (panel_height + gap) + 4
    parts.append(_note(left, total, points[0]["at_iso"]))
    parts.append(_note(width - right, total, points[-1]["at_iso"], ' text-anchor="end"'))
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{total + 6}" '
        f'role="img" aria-label="size, queue fraction and cost over time">{"".join(parts)}</svg>'
    )


def _note(x: int, y: int, text: Any, extra: str = "") -> str:
    """A small grey label of the chart."""
    return f'<text x="{x}" y="{y}" font-size="11" fill="#5f6b76"{extra}>{esc(text)}</text>'


def job_page(view: dict[str, Any], highlight: dict[str, Any] | None = None) -> str:
    """One job: summary, signals against targets, conditions, recoveries, chart, timeline."""
    summary = view["summary"]
    facts = {
        "Job": view["job_name"],
        "DAGs": ", ".join(view["dag_ids"]) or "-",
        "Status": view["status"],
        "Current nodes": summary["current_nodes"],
        "Desired nodes": summary["desired_nodes"],
        "Min / max nodes": f"{number_text(summary['min_nodes'])} / "
        f"{number_text(summary['max_nodes'])}",
        "Cost per hour": _money(summary["cost_per_hour"]),
        "Last decision": summary["last_decision"],
        "Decided at": summary["last_decision_at_iso"],
        "State": f"{view['variable_key']}, revision {number_text(view['revision'])}",
    }
    parts = []
    if view.get("error"):
        parts.append(f'<p class="error">This state does not load: {esc(view["error"])}</p>')
    parts.append(
        "<dl>" + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in facts.items()) + "</dl>"
    )
    if view["signals"]:
        parts.append(_section("Signals (current / target)", _table(view["signals"], SIGNALS)))
    parts.append(_section("Conditions", _table(view["conditions"], CONDITIONS)))
    parts.append("<h2>Recoveries from lost capacity</h2>")
    if quarantine := view.get("quarantine"):
        quarantined = ", ".join(f"{q['provider']} until {q['until_iso']}" for q in quarantine)
        parts.append(f"<p>Quarantined now: {esc(quarantined)}</p>")
    no_loss = '<p class="muted">No capacity lost so far.</p>'
    parts.append(_table(view["recoveries"], RECOVERIES) if view.get("recoveries") else no_loss)
    parts.append(_section("Size, queue fraction and cost over time", chart_svg(view["chart"])))
    timeline = view["timeline"]
    marked = {i: "recovery" for i, row in enumerate(timeline) if row.get("kind") == "recovery"}
    for index, row in enumerate(timeline):
        if highlight and all(row.get(key) == value for key, value in highlight.items()):
            marked[index] = "highlight"
            break
    parts.append(_section("Timeline (newest first)", _table(timeline, TIMELINE, marked)))
    return _page(f"Scale decisions: {view['job_name']}", "".join(parts))


def no_decision_page(dag_id: str, task_id: str, run_id: str, jobs_href: str) -> str:
    """The task-instance tab of a task that made no scale decision."""
    body = (
        f"<p>Task <code>{esc(task_id)}</code> of DAG <code>{esc(dag_id)}</code>, run "
        f"<code>{esc(run_id)}</code>, recorded no scale decision that is still in a job's "
        f"history.</p><p>{_link(jobs_href, 'All jobs with scale decisions')}</p>"
    )
    return _page("No scale decision here", body)
