"""HTML for the "Scale decisions" pages: escaped values, inline CSS and SVG, no scripts.

The pages run in the Airflow UI's same-origin iframe with the viewer's API
rights (SPEC 6.4), so every value goes through :func:`esc` (``html.escape``
with quotes) on its way into the markup, attributes included; nothing is
loaded from elsewhere, and the app sends a Content-Security-Policy that
forbids scripts. Links to Airflow's own pages open in the top window.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any

from elasticgrid_provider.core.formatting import number_text
from elasticgrid_provider.plugins.links import job_page_path

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


def esc(value: Any) -> str:
    """``value`` as text, HTML-escaped (quotes too, so it is safe in attributes)."""
    return html.escape("-" if value is None else str(value), quote=True)


def _table(headers: Iterable[str], rows: Iterable[Iterable[str]], row_classes=None) -> str:
    """A table; cells are markup the caller already escaped."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for index, row in enumerate(rows):
        css = (row_classes or {}).get(index)
        attribute = f' class="{esc(css)}"' if css else ""
        body.append(f"<tr{attribute}>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>{body}</body></html>"
    )


def _link(href: str | None, text: Any, top: bool = False) -> str:
    if not href:
        return esc(text)
    target = ' target="_top"' if top else ""
    return f'<a href="{esc(href)}"{target}>{esc(text)}</a>'


def _money(value: Any) -> str:
    return "-" if value is None else f"${float(value):.2f}/h"


def jobs_page(rows: list[dict[str, Any]], prefix: str) -> str:
    """The Browse > Scale decisions list."""
    if not rows:
        body = '<p class="muted">No job you may see has a scale decision yet.</p>'
    else:
        body = _table(
            ("job", "DAG", "current size", "last decision", "when", "cost per hour", "status"),
            (
                (
                    _link(prefix + job_page_path(row["job_name"]), row["job_name"]),
                    esc(", ".join(row["dag_ids"]) or "-"),
                    esc(row["current_nodes"]),
                    esc(row["last_decision"]),
                    esc(row["last_decision_at_iso"]),
                    esc(_money(row["cost_per_hour"])),
                    esc(row["status"])
                    + (f'<div class="error">{esc(row["error"])}</div>' if row["error"] else ""),
                )
                for row in rows
            ),
        )
    return _page("Scale decisions", f"<h1>Scale decisions</h1>{body}")


def chart_svg(points: list[dict[str, Any]], width: int = 720, panel_height: int = 70) -> str:
    """Three stacked step charts over time: nodes, queue fraction, cost per hour."""
    times = [p["at"] for p in points]
    if len(points) < 1:
        return '<p class="muted">No decisions to chart yet.</p>'
    start, end = min(times), max(times)
    span = (end - start) or 1.0
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
        known = [float(v) for v in values if isinstance(v, (int, float))]
        high = max(known) if known else 1.0
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
            f'<text x="4" y="{top + 28}" font-size="11" fill="#5f6b76">max '
            f"{esc(number_text(high))}</text>"
            f'<rect x="{left}" y="{top}" width="{plot_width}" height="{panel_height}" '
            'fill="none" stroke="#dde2e6"/>'
        )
        if coordinates:
            parts.append(
                f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
                f'points="{" ".join(coordinates)}"/>{"".join(dots)}'
            )
    total = 3 * (panel_height + gap) + 4
    parts.append(
        f'<text x="{left}" y="{total}" font-size="11" fill="#5f6b76">'
        f"{esc(points[0]['at_iso'])}</text>"
        f'<text x="{width - right}" y="{total}" font-size="11" fill="#5f6b76" '
        f'text-anchor="end">{esc(points[-1]["at_iso"])}</text>'
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{total + 6}" '
        f'role="img" aria-label="size, queue fraction and cost over time">{"".join(parts)}</svg>'
    )


def job_page(view: dict[str, Any], highlight: dict[str, Any] | None = None) -> str:
    """One job: summary, signals against targets, conditions, chart, timeline."""
    summary = view["summary"]
    facts = [
        ("Job", view["job_name"]),
        ("DAGs", ", ".join(view["dag_ids"]) or "-"),
        ("Status", view["status"]),
        ("Current nodes", summary["current_nodes"]),
        ("Desired nodes", summary["desired_nodes"]),
        (
            "Min / max nodes",
            f"{number_text(summary['min_nodes'])} / {number_text(summary['max_nodes'])}",
        ),
        ("Cost per hour", _money(summary["cost_per_hour"])),
        ("Last decision", summary["last_decision"]),
        ("Decided at", summary["last_decision_at_iso"]),
        ("State", f"{view['variable_key']}, revision {number_text(view['revision'])}"),
    ]
    parts = [f"<h1>Scale decisions: {esc(view['job_name'])}</h1>"]
    if view.get("error"):
        parts.append(f'<p class="error">This state does not load: {esc(view["error"])}</p>')
    parts.append(
        "<dl>" + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in facts) + "</dl>"
    )
    if view["signals"]:
        parts.append("<h2>Signals (current / target)</h2>")
        parts.append(
            _table(
                ("signal", "current", "target"),
                ((esc(s["name"]), esc(s["current"]), esc(s["target"])) for s in view["signals"]),
            )
        )
    parts.append("<h2>Conditions</h2>")
    parts.append(
        _table(
            ("type", "status", "message"),
            (
                (
                    esc(c["type"]),
                    f'<span class="{"ok" if c["status"] else "no"}">{esc(c["status"])}</span>',
                    esc(c["message"]),
                )
                for c in view["conditions"]
            ),
        )
    )
    parts.append("<h2>Recoveries from lost capacity</h2>")
    if view.get("quarantine"):
        parts.append(
            "<p>Quarantined now: "
            + esc(", ".join(f"{q['provider']} until {q['until_iso']}" for q in view["quarantine"]))
            + "</p>"
        )
    if view.get("recoveries"):
        parts.append(
            _table(
                ("time", "action", "from -> to", "lost part", "quarantine", "relaunched on"),
                (
                    (
                        esc(row["decided_at_iso"]),
                        f"<strong>{esc(row['action'])}</strong>",
                        f"{esc(row['from_nodes'])} -&gt; {esc(row['to_nodes'])}",
                        "<br>".join(esc(lost) for lost in row["lost"]),
                        "<br>".join(esc(q) for q in row["quarantine"]) or "-",
                        esc(row["relaunched_on"] or "-"),
                    )
                    for row in view["recoveries"]
                ),
            )
        )
    else:
        parts.append('<p class="muted">No capacity lost so far.</p>')
    parts.append("<h2>Size, queue fraction and cost over time</h2>")
    parts.append(chart_svg(view["chart"]))
    parts.append("<h2>Timeline (newest first)</h2>")
    marked = {
        index: "recovery"
        for index, row in enumerate(view["timeline"])
        if row.get("kind") == "recovery"
    }
    if highlight:
        for index, row in enumerate(view["timeline"]):
            if all(row.get(key) == value for key, value in highlight.items()):
                marked[index] = "highlight"
                break
    parts.append(
        _table(
            ("time", "action", "from -> to", "rule", "held back by", "reason", "cost/h", "made by"),
            (
                (
                    esc(row["headline"]),
                    f"<strong>{esc(row['action'])}</strong>",
                    f"{esc(row['from_nodes'])} -&gt; {esc(row['to_nodes'])}",
                    esc(row["rule"]),
                    esc(row["held_by"]),
                    esc(row["reason"]),
                    f"{esc(_money(row['cost_per_hour_before']))} -&gt; "
                    f"{esc(_money(row['cost_per_hour_after']))}",
                    _link(row["links"]["run"], row["run_id"], top=True)
                    + "<br>"
                    + _link(row["links"]["task"], row["task_id"], top=True),
                )
                for row in view["timeline"]
            ),
            marked,
        )
    )
    return _page(f"Scale decisions: {view['job_name']}", "".join(parts))


def no_decision_page(dag_id: str, task_id: str, run_id: str, jobs_href: str) -> str:
    """The task-instance tab of a task that made no scale decision."""
    body = (
        "<h1>No scale decision here</h1>"
        f"<p>Task <code>{esc(task_id)}</code> of DAG <code>{esc(dag_id)}</code>, run "
        f"<code>{esc(run_id)}</code>, recorded no scale decision that is still in a job's "
        f"history.</p><p>{_link(jobs_href, 'All jobs with scale decisions')}</p>"
    )
    return _page("No scale decision here", body)
