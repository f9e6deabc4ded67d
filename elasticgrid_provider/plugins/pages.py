"""HTML for the "Scale decisions" pages: escaped values, inline CSS and SVG, no scripts.

The pages run in the Airflow UI's same-origin iframe with the viewer's API rights,
so every value, attributes included, goes through :func:`esc`
(``html.escape`` with quotes); only :class:`Markup` built here from escaped values goes
in as it is. Nothing is loaded from elsewhere, and the app's Content-Security-Policy
forbids scripts. Links between the plugin's pages stay in the iframe (the UI keeps its
address in step, ``/plugin/scale-decisions/...``); links to Airflow's own pages open in
the top window. Times read "3m ago", with the full time in the UI's zone on hover.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterable
from datetime import timezone, tzinfo
from typing import Any
from urllib.parse import quote

from elasticgrid_provider.core.formatting import number_text
from elasticgrid_provider.links import job_page_path
from elasticgrid_provider.plugins.chart import chart_svg
from elasticgrid_provider.plugins.jobs import as_number
from elasticgrid_provider.plugins.machines import MACHINE_COLUMNS
from elasticgrid_provider.plugins.times import moment

# a table's columns: header -> the row's key, or a function of the row (:func:`_table`)
Columns = dict[str, str | Callable[[dict[str, Any]], Any]]

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:16px;color:#1d2329}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:20px 0 6px}
table{border-collapse:collapse;margin:4px 0}th,td{border-bottom:1px solid #dde2e6;
padding:4px 8px;text-align:left;vertical-align:top}th{background:#f3f5f7;font-weight:600}
.muted{color:#5f6b76}.ok{color:#1c7c3a;font-weight:600}.warn{color:#a15c00;font-weight:600}
.neutral{color:#5f6b76;font-weight:600}.error{color:#a4262c;font-weight:600}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 14px;margin:4px 0}
dt{font-weight:600}dd{margin:0}tr.highlight{background:#fff6d6}code{font-size:13px}
tr.recovery{background:#fdecea}time,.nowrap{white-space:nowrap}
td.c-made-by a,td.c-launch-that-followed a,td.c-rule,td.c-held-back-by{overflow-wrap:anywhere}
table.wide{font-size:13px}td.c-reason{min-width:16em}
td.c-made-by,td.c-launch-that-followed{min-width:7em}td.c-rule,td.c-held-back-by{min-width:9em}
table.wide{width:100%}.card{background:#fff6d6;border:1px solid #eed98f;border-radius:6px;
padding:6px 12px;max-width:1100px}.card dl{grid-template-columns:10em auto}
.columns{display:flex;flex-wrap:wrap;gap:8px 48px}svg{max-width:100%;height:auto}
pre{background:#f6f8fa;padding:8px;overflow:auto;max-height:70vh}
"""


class Markup(str):
    """HTML made here from escaped values: :func:`esc` leaves it as it is (no double escaping)."""


def esc(value: Any) -> Markup:
    """``value`` as text, HTML-escaped (quotes too, so it is safe in attributes); markup as is."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape("-" if value is None else str(value), quote=True))


def _table(rows: Iterable[dict[str, Any]], columns: Columns, marked=None, css: str = "") -> str:
    """A table of escaped cells, a column per ``columns`` entry; ``marked``: CSS classes by row;
    ``css``: the table's class."""
    slugs = [re.sub(r"[^a-z]+", "-", header.lower()).strip("-") for header in columns]
    head = "".join(
        f'<th class="c-{slug}">{esc(header)}</th>'
        for slug, header in zip(slugs, columns, strict=True)
    )
    body = []
    for index, row in enumerate(rows):
        cells = [cell(row) if callable(cell) else row.get(cell) for cell in columns.values()]
        mark = (marked or {}).get(index)
        attribute = f' class="{esc(mark)}"' if mark else ""
        tds = "".join(
            f'<td class="c-{slug}">{esc(c)}</td>' for slug, c in zip(slugs, cells, strict=True)
        )
        body.append(f"<tr{attribute}>{tds}</tr>")
    table = f' class="{esc(css)}"' if css else ""
    return f"<table{table}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _section(title: str, body: str, anchor: str = "") -> str:
    ident = f' id="{esc(anchor)}"' if anchor else ""
    return f"<h2{ident}>{esc(title)}</h2>{body}"


def _page(title: str, body: str) -> str:
    """A whole page, headed by its title."""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
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
    return Markup(f'<span class="nowrap">{esc(before)} -&gt; {esc(after)}</span>')


def _money(value: Any) -> str:
    number = as_number(value)
    return "-" if number is None else f"${number:.2f}/h"


def time_html(when: dict[str, str] | None) -> Markup:
    """A time as "3m ago", its full time in the UI's zone on hover (one line)."""
    if not isinstance(when, dict):
        return esc("-")
    return Markup(
        f'<time datetime="{esc(when.get("iso"))}" title="{esc(when.get("absolute"))}">'
        f"{esc(when.get('relative'))}</time>"
    )


def _timeline_time(row: dict[str, Any], link: Callable[..., str] | None = None) -> Markup:
    """When: the time, or a folded run's checks and span, linked to the run itself."""
    if not row.get("held"):
        return time_html(row.get("at"))
    span = f"{time_html(row.get('first_at'))} to {time_html(row.get('last_at'))}"
    run = row.get("run")
    held = esc(row["held"])
    if link is not None and isinstance(run, list) and len(run) == 2:
        entries = row.get("entries")
        held = Markup(
            f"{_link(link(run=f'{run[0]}-{run[1]}'), row['held'])} ({esc(entries)} records)"
        )
    return Markup(f"{held}, {span}")


def _timeline_link(
    job_name: str, root: str, highlight: dict[str, Any] | None
) -> Callable[..., str]:
    """The job page's address with a timeline ``page`` or ``run``, keeping the check shown
    on top (``#timeline``: the browser opens at the timeline)."""
    kept = {k: str(v) for k, v in (highlight or {}).items() if v is not None}

    def link(**query: Any) -> str:
        chosen = {k: str(v) for k, v in query.items() if v is not None}
        return root + job_page_path(job_name, **kept, **chosen) + "#timeline"

    return link


def _paging(info: dict[str, Any], link: Callable[..., str]) -> str:
    """The timeline's page links: newer, where, older; the run shown, and the way back."""
    page, pages = info.get("page") or 1, info.get("pages") or 1
    run = info.get("run")
    shown = f"{run[0]}-{run[1]}" if isinstance(run, list) and len(run) == 2 else None
    words: list[Any] = []
    if shown:
        words.append(Markup(f"Records {esc(shown)} one by one; {_link(link(), 'all decisions')}."))
    if pages > 1:
        if page > 1:
            words.append(_link(link(page=1, run=shown), "newest"))
            words.append(_link(link(page=page - 1, run=shown), "newer"))
        words.append(f"page {page} of {pages} ({info.get('total_rows')} rows)")
        if page < pages:
            words.append(_link(link(page=page + 1, run=shown), "older"))
            words.append(_link(link(page=pages, run=shown), "oldest"))
    if not words:
        return ""
    return f'<p class="paging">{" ".join(esc(word) for word in words)}</p>'


def _status(condition: dict[str, Any]) -> Markup:
    tone = condition.get("tone") if condition.get("tone") in ("ok", "warn") else "neutral"
    return Markup(f'<span class="{tone}">{esc(condition.get("status"))}</span>')


def _launch_after(root: str, row: dict[str, Any]) -> Markup:
    launch = row.get("launch_after")
    if not isinstance(launch, dict):
        return esc("-")
    return _link(launch.get("task"), launch.get("launch_id"), top=True)


ACTION: Columns = {
    "action": lambda row: Markup(f"<strong>{esc(row.get('action'))}</strong>"),
    "from -> to": lambda row: _arrow(row.get("from_nodes"), row.get("to_nodes")),
}
MACHINES: Columns = {**MACHINE_COLUMNS, "launched": lambda row: time_html(row.get("launched"))}
SIGNALS: Columns = {"signal": "name", "current": "current", "target": "target"}
CONDITIONS: Columns = {"type": "type", "status": _status, "reason": "reason", "message": "message"}
RECOVERIES: Columns = {
    "time": lambda row: time_html(row.get("at")),
    **ACTION,
    "lost part": lambda row: _lines(row.get("lost") or ()),
    "quarantine": lambda row: _lines(row.get("quarantine") or ()) or "-",
    "relaunched on": lambda row: row.get("relaunched_on") or "-",
}


def _shared_grid(root: str, row: dict[str, Any]) -> Markup:
    """The room the shared grid left a decision and who held what, or the job that
    preempted it (linked to its page); ``-`` for a job alone on its grid."""
    grid = row.get("shared_grid") or {}
    by = grid.get("preempted_by")
    lines: list[Any] = []
    if by:
        lines.append(Markup(f"preempted by {_link(root + job_page_path(by), by, top=True)}"))
    if grid.get("room") is not None:
        lines.append(f"room for {grid['room']} nodes")
    lines += grid.get("holders") or ()
    return Markup("<br>".join(esc(line) for line in lines)) if lines else Markup("-")


def _timeline_columns(root: str) -> Columns:
    return {
        "time": _timeline_time,
        **ACTION,
        "rule": "rule",
        "held back by": "held_by",
        "shared grid": lambda row: _shared_grid(root, row),
        "reason": "reason",
        "cost/h": lambda row: _arrow(
            _money(row.get("cost_per_hour_before")), _money(row.get("cost_per_hour_after"))
        ),
        "made by": lambda row: _lines(
            _link((row.get("links") or {}).get(kind), row.get(f"{kind}_id"), top=True)
            for kind in ("run", "task")
        ),
        "launch that followed": lambda row: _launch_after(root, row),
    }


def jobs_page(
    rows: list[dict[str, Any]], prefix: str, now: float = 0.0, zone: tzinfo = timezone.utc
) -> str:
    """The Browse > Scale decisions list."""
    columns: Columns = {
        "job": lambda row: _link(prefix + job_page_path(str(row["job_name"])), row["job_name"]),
        "DAG": lambda row: ", ".join(map(str, row.get("dag_ids") or ())) or "-",
        "size": "current_nodes",
        "last decision": "last_decision",
        "when": lambda row: time_html(moment(row.get("last_decision_at"), now, zone)),
        "cost per hour": lambda row: "-" if row.get("ended") else _money(row.get("cost_per_hour")),
        "status": lambda row: Markup(
            f'{esc(row.get("status"))} <span class="muted">({esc(row.get("status_source"))})</span>'
            + (f'<div class="error">{esc(row["error"])}</div>' if row.get("error") else "")
        ),
    }
    empty = '<p class="muted">No job you may see has a scale decision yet.</p>'
    return _page("Scale decisions", _table(rows, columns) if rows else empty)


def _facts(pairs: dict[str, Any]) -> str:
    return (
        "<dl>" + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in pairs.items()) + "</dl>"
    )


def _now_facts(view: dict[str, Any], root: str, launches: dict[str, Any]) -> str:
    """The job now: status, size, desired size, launch and parts with their rank logs."""
    summary, live = view["summary"], view.get("live") or {}
    desired: Any = summary.get("desired_nodes")
    if summary.get("desired_held_by"):
        desired = Markup(
            f"{esc(desired)} "
            f'<span class="muted">(recommended; held by {esc(summary["desired_held_by"])})</span>'
        )
    if view.get("finished"):
        desired = Markup('<span class="muted">none: the job ended</span>')
    status = Markup(
        f"<strong>{esc(view['status'])}</strong> "
        f'<span class="muted">({esc(view.get("status_source"))})</span>'
    )
    facts: dict[str, Any] = {
        "Status": status,
        "Current nodes": summary.get("current_nodes"),
        "Desired nodes": desired,
        "Min / max nodes": f"{number_text(summary.get('min_nodes'))} / "
        f"{number_text(summary.get('max_nodes'))}",
        "Cost per hour": "-"
        if view.get("finished") or summary.get("cost_per_hour") is None
        else Markup(
            f"{esc(_money(summary.get('cost_per_hour')))} "
            f'<span class="muted">({esc(summary.get("cost_source"))})</span>'
        ),
    }
    launch_id = live.get("launch_id")
    if launch_id:
        task = (launches.get(launch_id) or {}).get("task")
        facts["Launch"] = Markup(
            f"{_link(task, launch_id, top=True)} "
            f'<span class="muted">{esc(live.get("launch_state"))}, launched '
            f"{time_html(view.get('launched_at'))}</span>"
        )
        if live.get("down_reason"):
            facts["Down because"] = live["down_reason"]
    if live.get("error"):
        facts["Live status"] = Markup(f'<span class="muted">{esc(live["error"])}</span>')
    parts = [p for p in live.get("parts") or () if isinstance(p, dict)]
    if parts:
        facts["Rank logs"] = _lines(_part_logs(view["job_name"], root, part) for part in parts)
    return _facts(facts)


def _part_logs(job_name: str, root: str, part: dict[str, Any]) -> Markup:
    """A part's status and a link to each rank's log (the first 8, then "...")."""
    base = f"{root}{job_page_path(job_name)}/logs/{quote(str(part.get('name')), safe='')}"
    count = part.get("ranks")
    ranks = count if isinstance(count, int) else 0
    links = " ".join(_link(f"{base}/{rank}", f"rank {rank}") for rank in range(min(ranks, 8)))
    more = " ..." if ranks > 8 else ""
    head = f"{part.get('name')}: {part.get('status')}, {part.get('nodes')} node(s)"
    return Markup(f"{esc(head)} {links}{more}")


def job_page(
    view: dict[str, Any],
    highlight: dict[str, Any] | None = None,
    *,
    root: str = "",
    launches: dict[str, Any] | None = None,
    now: float | None = None,
    zone: tzinfo = timezone.utc,
) -> str:
    """One job: now, the last decision, this check's decision on top when asked, signals,
    conditions, recoveries, chart, timeline."""
    summary = view["summary"]
    parts = []
    if view.get("error"):
        parts.append(f'<p class="error">This state does not load: {esc(view["error"])}</p>')
    for problem in view.get("errors") or ():
        parts.append(f'<p class="error">{esc(problem)}</p>')
    timeline = [row for row in view["timeline"] if isinstance(row, dict)]
    marked = {i: "recovery" for i, row in enumerate(timeline) if row.get("kind") == "recovery"}
    marked.update({i: "highlight" for i, row in enumerate(timeline) if row.get("this_check")})
    columns = _timeline_columns(root)
    link = _timeline_link(view["job_name"], root, highlight)
    columns["time"] = lambda row: _timeline_time(row, link)
    if highlight:
        this_check = view.get("this_check")
        body = (
            _decision_card(this_check, root, view)
            if isinstance(this_check, dict)
            else '<p class="muted">This check made no decision that is still in the history.</p>'
        )
        parts.append(_section("This check's decision", body, "this-check"))
    last = Markup(
        f"{esc(summary.get('last_decision'))} "
        f'<span class="muted">({time_html(summary.get("last_decision_at"))})</span>'
    )
    state = f"{view['variable_key']}, revision {number_text(view.get('revision'))}"
    parts.append(
        '<div class="columns"><div>'
        + _section("Now", _now_facts(view, root, launches or {}), "now")
        + "</div><div>"
        + _section(
            "The last decision",
            _facts({"Decision": last, "DAGs": ", ".join(view["dag_ids"]) or "-", "State": state}),
        )
        + "</div></div>"
    )
    if machines := [row for row in view.get("machines") or () if isinstance(row, dict)]:
        parts.append(_section("Machines", _table(machines, MACHINES), "machines"))
    if view["signals"]:
        parts.append(
            _section("Signals at the last decision", _table(view["signals"], SIGNALS), "signals")
        )
    parts.append(_section("Conditions", _table(view["conditions"], CONDITIONS), "conditions"))
    parts.append("<h2>Recoveries from lost capacity</h2>")
    if quarantine := view.get("quarantine"):
        quarantined = ", ".join(
            f"{q.get('provider')} until {(q.get('until') or {}).get('absolute')}"
            for q in quarantine
        )
        parts.append(f"<p>Quarantined now: {esc(quarantined)}</p>")
    no_loss = '<p class="muted">No capacity lost so far.</p>'
    parts.append(_table(view["recoveries"], RECOVERIES) if view.get("recoveries") else no_loss)
    chart = chart_svg(
        view["chart"], view.get("markers"), until=None if view.get("finished") else now, zone=zone
    )
    parts.append(_section("Size, queue fraction and cost over time", chart, "chart"))
    paging = _paging(view.get("timeline_page") or {}, link)
    timeline_table = _table(timeline, columns, marked, "wide")
    parts.append(_section("Timeline (newest first)", paging + timeline_table + paging, "timeline"))
    return _page(f"Scale decisions: {view['job_name']}", "".join(parts))


def _decision_card(row: dict[str, Any], root: str, view: dict[str, Any]) -> str:
    """One decision in full, as a highlighted card (the check the page was opened for)."""
    head = Markup(
        f"<strong>{esc(row.get('action'))}</strong> {_arrow(row.get('from_nodes'), row.get('to_nodes'))} "
        f'<span class="muted">({_timeline_time(row)})</span>'
    )
    links = row.get("links") or {}
    made_by = Markup(
        f"{_link(links.get('task'), row.get('task_id'), top=True)} in run "
        f"{_link(links.get('run'), row.get('run_id'), top=True)}"
    )
    facts = {
        "Decision": head,
        "Rule": row.get("rule"),
        "Held back by": row.get("held_by"),
        "Shared grid": _shared_grid(root, row),
        "Reason": row.get("reason"),
        "Cost per hour": _arrow(
            _money(row.get("cost_per_hour_before")), _money(row.get("cost_per_hour_after"))
        ),
        "Made by": made_by,
        "Launch that followed": _launch_after(root, row),
    }
    live = view.get("live") or {}
    launch = row.get("launch_after") or {}
    if launch.get("launch_id") and launch.get("launch_id") == live.get("launch_id"):
        parts = [p for p in live.get("parts") or () if isinstance(p, dict)]
        facts["Its rank logs"] = _lines(_part_logs(view["job_name"], root, p) for p in parts)
    return f'<div class="card">{_facts(facts)}</div>'


def no_decision_page(
    dag_id: str, task_id: str, run_id: str, map_index: int, job_name: str | None, jobs_href: str
) -> str:
    """The task-instance tab of a task that made no scale decision."""
    mapped = f", map index <code>{esc(map_index)}</code>" if map_index >= 0 else ""
    job = f" for job <code>{esc(job_name)}</code>" if job_name else ""
    body = (
        f"<p>Task <code>{esc(task_id)}</code> of DAG <code>{esc(dag_id)}</code>, run "
        f"<code>{esc(run_id)}</code>{mapped}, recorded no scale decision{job} that is still in "
        f"a job's history.</p><p>{_link(jobs_href, 'All jobs with scale decisions')}</p>"
    )
    return _page("No scale decision here", body)


def missing_job_page(job_name: str, jobs_href: str) -> str:
    """A job with no page: why, and what to do (never raw JSON)."""
    body = (
        f"<p>There are no scale decisions for job <code>{esc(job_name)}</code> that you may "
        "read.</p><ul><li>No ElasticScaleSensor has checked this job yet: a launch that "
        "failed, or one whose check has not run, records no decision. The launch task's log "
        "says why a launch failed.</li><li>Or the decisions were recorded by a DAG you may "
        "not read: ask for read access to that DAG.</li><li>Or its state Variable "
        f"<code>{esc('elasticgrid_scale_state__' + job_name)}</code> was deleted.</li></ul>"
        f"<p>{_link(jobs_href, 'All jobs with scale decisions')}</p>"
    )
    return _page("No such job", body)


def log_page(job_name: str, part: str, rank: int, text: str | None, why: str, back: str) -> str:
    """The tail of one rank's log, or why it cannot be shown."""
    body = f"<p>{_link(back + '#now', f'Back to job {job_name}')}</p>" + (
        f"<pre>{esc(text)}</pre>" if text is not None else f'<p class="error">{esc(why)}</p>'
    )
    return _page(f"Log of rank {rank} of part {part}", body)
