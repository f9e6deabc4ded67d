"""The "Fleet" page: the grid ledger as ``elasticgrid fleet`` shows it, on the API server.

Imported by :func:`~elasticgrid_provider.plugins.app.create_app` only, at
``/elasticgrid/fleet`` and ``/elasticgrid/api/fleet``; it never writes, and never shows a
job or a server path to a user who may not read it. The rules: docs/fleet-ledger.md
("The Fleet page").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse

from elasticgrid_provider.core.fleet.view import nodes_text, why_text
from elasticgrid_provider.core.formatting import clock_text, seconds_text
from elasticgrid_provider.core.state import state_variable_key
from elasticgrid_provider.links import job_page_path
from elasticgrid_provider.plugins.access import (
    SECURITY_HEADERS,
    Access,
    airflow_root,
    hide_paths,
    html_response,
    jobs_roots,
)
from elasticgrid_provider.plugins.jobs import StoredState, one_line
from elasticgrid_provider.plugins.live import connection_hook
from elasticgrid_provider.plugins.pages import Columns, Markup, _link, _page, _table, esc
from elasticgrid_provider.plugins.state_cache import read_scale_states

OTHER_JOBS = "other jobs"


def read_fleet(hook: Any) -> dict[str, Any]:
    """The fleet view of ``hook``'s jobs root, as ``elasticgrid fleet`` shows it
    (:func:`~elasticgrid_provider.hooks.fleet_view.read_fleet`); or ``{"error": ...}`` when
    it cannot be read here (never raises)."""
    from elasticgrid_provider.hooks.fleet_view import read_fleet as fleet_of

    try:
        return fleet_of(hook)
    except Exception as exc:
        return {"error": f"the grid ledger cannot be read here: {one_line(exc)}"}


def only_readable(view: dict[str, Any], readable: set[str]) -> dict[str, Any]:
    """``view`` with every job not in ``readable`` counted under :data:`OTHER_JOBS`."""
    providers = []
    for provider in view["providers"]:
        jobs: dict[str, dict[str, int]] = {}
        for job, cell in provider["jobs"].items():
            name = job if job in readable else OTHER_JOBS
            into = jobs.setdefault(name, {"held": 0, "reserved": 0})
            into["held"] += cell["held"]
            into["reserved"] += cell["reserved"]
        providers.append({**provider, "jobs": jobs})
    queue = [
        request if request["job"] in readable else {**request, "job": OTHER_JOBS}
        for request in view["queue"]
    ]
    jobs_rows = [row for row in view["jobs"] if row["job"] in readable]
    shrinks = [
        {
            **shrink,
            "job": shrink["job"] if shrink["job"] in readable else OTHER_JOBS,
            "by_job": shrink["by_job"] if shrink["by_job"] in readable else OTHER_JOBS,
        }
        for shrink in view.get("shrinks", [])
    ]
    last = view.get("last_round")
    if last:
        order = [row if row["job"] in readable else {**row, "job": OTHER_JOBS}
                 for row in last["order"]]  # fmt: skip
        last = {**last, "order": order, "queued": {
            job: why for job, why in last["queued"].items() if job in readable}}  # fmt: skip
    return {**view, "providers": providers, "jobs": jobs_rows, "queue": queue,
            "shrinks": shrinks, "last_round": last}  # fmt: skip


def _job_cell(job: str) -> Callable[[dict[str, Any]], str]:
    """The column of ``job`` in the providers x jobs table."""
    return lambda provider: nodes_text(provider["jobs"].get(job))


def fleet_page(view: dict[str, Any], root: str, linked: set[str]) -> str:
    """The page: the ledger's note, providers x jobs, the jobs, the queue and the shrink requests;
    job names in ``linked`` link to their job pages under ``root``."""
    if view.get("error"):
        return _page("Fleet", f'<p class="error">{esc(view["error"])}</p>')

    def job_link(job: str) -> Markup:
        return _link(root + job_page_path(job), job) if job in linked else esc(job)

    names = sorted({job for provider in view["providers"] for job in provider["jobs"]})
    columns: Columns = {
        "provider": "name",
        "capacity": "capacity",
        "free": "free",
        "pool": lambda row: row["pool"] or "-",
    }
    for job in names:
        columns[job] = _job_cell(job)
    ledger = f"Ledger {esc(view['ledger'])}; capacities" if view.get("ledger") else "Capacities"
    head = f'<p class="muted">{ledger}: {esc(view["capacity_source"])}.</p>'
    if view.get("note"):
        head += f'<p class="warn">{esc(view["note"])}</p>'
    body = head + "<h2>Providers and jobs</h2>" + _table(view["providers"], columns)
    body += "<h2>Jobs</h2>"
    if view["jobs"]:
        job_columns: Columns = {
            "job": lambda row: job_link(row["job"]),
            "priority": "priority",
            "min nodes": "min_nodes",
            "launch": "launch_id",
        }
        body += _table(view["jobs"], job_columns)
    else:
        body += '<p class="muted">No job you may see holds nodes.</p>'
    body += "<h2>Queue</h2>"
    if view["queue"]:
        queue_columns: Columns = {
            "#": "position",
            "job": lambda row: job_link(row["job"]),
            "wants": "nodes",
            "at least": "min_nodes",
            "priority": "priority",
            "since": lambda row: clock_text(row["since"]),
            "timeout": lambda row: seconds_text(row["timeout_s"]),
            "last look": lambda row: clock_text(row["last_look"]),
            "lease": lambda row: seconds_text(row["lease_s"]),
            "why": why_text,
        }
        body += _table(view["queue"], queue_columns)
    else:
        body += '<p class="muted">No request waits.</p>'
    body += "<h2>Shrink requests</h2>"
    if view.get("shrinks"):
        shrink_columns: Columns = {
            "job": lambda row: job_link(row["job"]),
            "shrink to": "to_nodes",
            "asked by": lambda row: job_link(row["by_job"]),
            "its priority": "by_priority",
            "since": lambda row: clock_text(row["since"]),
        }
        body += _table(view["shrinks"], shrink_columns)
    else:
        body += '<p class="muted">No job is asked to shrink.</p>'
    body += "<h2>Last allocation round</h2>"
    last = view.get("last_round")
    if last:
        body += f'<p class="muted">{esc(last["by"])}, {esc(clock_text(last["at"]))}.</p>'
        round_columns: Columns = {
            "job": lambda row: job_link(row["job"]),
            "tier": "tier",
            "nodes after": "nodes",
            "hopeless": lambda row: "yes" if row["hopeless"] else "",
        }
        body += _table(last["order"], round_columns)
    else:
        body += '<p class="muted">No allocation round is recorded.</p>'
    return _page("Fleet", body)


def add_fleet_routes(app: FastAPI) -> None:
    """``/fleet`` (the page) and ``/api/fleet`` (its data as JSON), under the app's rules."""

    def visible(user: Any) -> tuple[dict[str, Any], set[str]]:
        """The view as ``user`` may see it (server paths only for admins), and the jobs that
        have a page to link."""
        access = Access(user)
        hook = connection_hook()
        view = read_fleet(hook)
        if view.get("error"):
            return (view if access.sees_paths else hide_paths(view, jobs_roots(hook))), set()
        stored = {state.job_name: state for state in read_scale_states()}
        names = {job for p in view["providers"] for job in p["jobs"]}
        names |= {request["job"] for request in view["queue"]}
        names |= {s[key] for s in view.get("shrinks", []) for key in ("job", "by_job")}
        access.know_teams(stored[job] for job in names if job in stored)
        readable = {
            job
            for job in names
            if access.may_read(stored.get(job) or StoredState(job, state_variable_key(job), None))
        }
        view = only_readable(view, readable)
        if not access.sees_paths:
            hidden = hide_paths(view, [view["jobs_root"], *jobs_roots(hook)])
            view = {**hidden, "jobs_root": None, "ledger": None}
        return view, readable & set(stored)

    @app.get("/fleet", response_class=HTMLResponse)
    def show_fleet(request: Request, user: GetUserDep) -> HTMLResponse:
        """The grid ledger: providers x jobs, free nodes, the queue."""
        view, linked = visible(user)
        return html_response(fleet_page(view, airflow_root(request), linked))

    @app.get("/api/fleet")
    def show_fleet_json(user: GetUserDep) -> JSONResponse:
        """The fleet page's data as JSON."""
        view, _ = visible(user)
        return JSONResponse(view, headers=SECURITY_HEADERS)
