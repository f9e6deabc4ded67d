"""The plugin's FastAPI app, mounted at ``/elasticgrid`` on the API server.

Imported by :class:`~elasticgrid_provider.plugins.plugin.LazyApp` on the first request.
Airflow adds no authentication to plugin apps, so every route must depend on
``GetUserDep``. The rules: docs/ui-audit.md ("Permissions", "JSON").
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from airflow.api_fastapi.auth.managers.models.resource_details import (
    DagAccessEntity,
)
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse

from elasticgrid_provider.core.clock import epoch_now
from elasticgrid_provider.links import URL_PREFIX, job_page_path
from elasticgrid_provider.plugins.access import (
    SECURITY_HEADERS,
    Access,
    airflow_root,
    hide_paths,
    html_response,
    jobs_roots,
)
from elasticgrid_provider.plugins.fleet import add_fleet_routes
from elasticgrid_provider.plugins.jobs import (
    UNMAPPED,
    StoredState,
    find_task_decision,
    job_row,
    one_line,
)
from elasticgrid_provider.plugins.live import (
    checked_job,
    connection_hook,
    launch_tasks,
    live_status,
    rank_log,
)
from elasticgrid_provider.plugins.pages import (
    job_page,
    jobs_page,
    log_page,
    missing_job_page,
    no_decision_page,
)
from elasticgrid_provider.plugins.state_cache import read_scale_states
from elasticgrid_provider.plugins.timeline import fold, positions_of, run_links, timeline_page
from elasticgrid_provider.plugins.times import ui_zone
from elasticgrid_provider.plugins.view import job_view


def _map_index(value: str | None) -> int:
    """The tab's ``map_index``: a number, or -1 (unmapped: the UI leaves ``{MAP_INDEX}``)."""
    try:
        return int(value) if value is not None else UNMAPPED
    except ValueError:
        return UNMAPPED


def _readable(access: Access, job_name: str) -> StoredState | None:
    """The job's state if it exists and the user may read it, else None (a 404 either way)."""
    states = read_scale_states(job_name)
    return states[0] if states and access.may_read(states[0]) else None


class _Request:
    """What one request reads once: the user's access, the connection's hook, the paths a
    user who may not see them reads as ``<jobs root>``."""

    def __init__(self, user: Any) -> None:
        self.access = Access(user)
        self.hook = connection_hook()

    def shown(self, value: Any) -> Any:
        """``value`` as this user may see it: server paths only for admins."""
        if self.access.sees_paths:
            return value
        return hide_paths(value, self.roots)

    @cached_property
    def roots(self) -> list[str]:
        """The server paths this user may not see (:func:`~.access.jobs_roots`)."""
        return jobs_roots(self.hook)


def _view(
    asked: _Request, stored: StoredState, root: str, **shown: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The job's view with its live status and launches, and the launches by id; ``shown``:
    the timeline's ``page``/``run`` and the ``highlight``ed check."""
    launches = launch_tasks(stored.job_name, stored.dag_ids)
    try:
        view = job_view(
            stored,
            epoch_now(),
            root,
            live=live_status(stored.job_name, asked.hook),
            launches=launches,
            zone=ui_zone(),
            **shown,
        )
    except Exception as exc:  # a state the view cannot read: its page says so
        view = job_view(StoredState(stored.job_name, stored.variable_key, None), epoch_now(), root)
        view["error"] = f"this state cannot be shown: {one_line(exc)}"
    tasks = {launch_id: run_links(root, task)["task"] for launch_id, task in launches.items()}
    return asked.shown(view), {launch_id: {"task": link} for launch_id, link in tasks.items()}


def _job_html(
    request: Request, asked: _Request, stored: StoredState, highlight: dict[str, Any] | None
) -> str:
    root = airflow_root(request)
    query = request.query_params
    view, launches = _view(
        asked, stored, root, page=query.get("page"), run=query.get("run"), highlight=highlight
    )
    return job_page(view, highlight, root=root, launches=launches, now=epoch_now(), zone=ui_zone())


def _rows(asked: _Request) -> list[dict[str, Any]]:
    """The list's rows the user may see, each with the job's live status."""
    states = read_scale_states()
    asked.access.know_teams(states)
    return [
        asked.shown(job_row(stored, live_status(stored.job_name, asked.hook)))
        for stored in states
        if asked.access.may_read(stored)
    ]


def create_app() -> FastAPI:
    """Build the app (called once, on the first request)."""
    app = FastAPI(
        title="ElasticGrid scale decisions", docs_url=None, redoc_url=None, openapi_url=None
    )

    @app.get("/jobs", response_class=HTMLResponse)
    def list_jobs(request: Request, user: GetUserDep) -> HTMLResponse:
        """Every job the user may see, with its size, last decision, cost and status."""
        rows = _rows(_Request(user))
        return html_response(jobs_page(rows, airflow_root(request), epoch_now(), ui_zone()))

    @app.get("/api/jobs")
    def list_jobs_json(user: GetUserDep) -> JSONResponse:
        """The jobs list as JSON."""
        return JSONResponse({"jobs": _rows(_Request(user))}, headers=SECURITY_HEADERS)

    @app.get("/jobs/{job_name}", response_class=HTMLResponse)
    def show_job(
        request: Request,
        user: GetUserDep,
        job_name: str,
        dag_id: str | None = None,
        run_id: str | None = None,
        task_id: str | None = None,
        map_index: str | None = None,
    ) -> HTMLResponse:
        """One job's page; the decision of ``dag_id``/``run_id``/``task_id``/``map_index`` on
        top; ``page``/``run``: the timeline's page; a job with no page is a readable 404 page."""
        asked = _Request(user)
        stored = _readable(asked.access, job_name)
        if stored is None:
            jobs = f"{airflow_root(request)}{URL_PREFIX}/jobs"
            return html_response(missing_job_page(job_name, jobs), 404)
        wanted = {"dag_id": dag_id, "run_id": run_id, "task_id": task_id}
        highlight: dict[str, Any] = {k: v for k, v in wanted.items() if v is not None}
        if highlight:
            highlight["map_index"] = _map_index(map_index)
        return html_response(_job_html(request, asked, stored, highlight or None))

    @app.get("/api/jobs/{job_name}")
    def show_job_json(
        request: Request,
        user: GetUserDep,
        job_name: str,
        page: str | None = None,
        run: str | None = None,
    ) -> JSONResponse:
        """One job's page data as JSON (the timeline's ``page``, or the folded ``run``), with
        the history entries of that page as recorded (their ``inputs`` are in the Variable)."""
        asked = _Request(user)
        stored = _readable(asked.access, job_name)
        if stored is None:
            raise HTTPException(status_code=404, detail=f"no job {job_name!r} with scale decisions")
        view, _ = _view(asked, stored, airflow_root(request), page=page, run=run)
        info = view.get("timeline_page") or {}
        folded = stored.derived("folded", lambda: fold(stored.history))
        shown = timeline_page(stored.history, info.get("page"), run, None, folded)
        history = [stored.history[position] for position in positions_of(shown)]
        return JSONResponse({**view, "history": asked.shown(history)}, headers=SECURITY_HEADERS)

    @app.get("/jobs/{job_name}/logs/{part_name}/{rank}", response_class=HTMLResponse)
    def show_rank_log(
        request: Request, user: GetUserDep, job_name: str, part_name: str, rank: int
    ) -> HTMLResponse:
        """The tail of one rank's log of the job's current launch (iroh-tinker's)."""
        root = airflow_root(request)
        asked = _Request(user)
        if _readable(asked.access, job_name) is None:
            return html_response(missing_job_page(job_name, f"{root}{URL_PREFIX}/jobs"), 404)
        text, why = rank_log(job_name, part_name, rank)
        why = asked.shown(why)
        back = root + job_page_path(job_name)
        return html_response(log_page(job_name, part_name, rank, text, why, back))

    @app.get(
        "/tasks/{dag_id}/{task_id}/{run_id:path}",
        response_class=HTMLResponse,
        dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.TASK_INSTANCE))],
    )
    def show_task(
        request: Request,
        user: GetUserDep,
        dag_id: str,
        task_id: str,
        run_id: str,
        map_index: str | None = None,
    ) -> HTMLResponse:
        """The task-instance tab: the decision of this task instance (map index included) about
        the job it checked, on top of that job's page; or "no scale decision here"."""
        root = airflow_root(request)
        index = _map_index(map_index)
        job_name = checked_job(dag_id, task_id, run_id, index)
        states = read_scale_states(job_name) if job_name else read_scale_states()
        found = find_task_decision(states, dag_id, task_id, run_id, index, job_name)
        asked = _Request(user)
        if found is None or not asked.access.may_read(found[0]):
            jobs = f"{root}{URL_PREFIX}/jobs"
            return html_response(no_decision_page(dag_id, task_id, run_id, index, job_name, jobs))
        highlight = {"dag_id": dag_id, "task_id": task_id, "run_id": run_id, "map_index": index}
        return html_response(_job_html(request, asked, found[0], highlight))

    add_fleet_routes(app)
    return app
