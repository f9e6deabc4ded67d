"""The plugin's FastAPI app, mounted at ``/elasticgrid`` on the API server.

Imported by :class:`~elasticgrid_provider.plugins.plugin.LazyApp` on the first request.
Rules:

* Airflow adds no authentication to plugin apps (SPEC 6.4): every route depends on
  ``GetUserDep`` (no credentials: 401, a bad token: 403); the browser's ``_token``
  cookie authenticates a logged-in user in the iframe.
* A user sees a job only when allowed to read every DAG that recorded its decisions
  (none recorded yet: its state Variable); otherwise it answers 404, as if it did not
  exist, and the list leaves it out. The task-instance tab also needs that task's DAG.
* GET only; HTML pages carry a Content-Security-Policy without scripts, and
  ``/api/jobs[/<job>]`` serves the same data as JSON for scripts.
"""

from __future__ import annotations

from typing import Any

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import (
    DagAccessEntity,
    DagDetails,
    VariableDetails,
)
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse

from elasticgrid_provider.core.clock import epoch_now
from elasticgrid_provider.plugins.jobs import (
    StoredState,
    find_task_decision,
    job_row,
    job_view,
    read_scale_states,
)
from elasticgrid_provider.plugins.links import URL_PREFIX
from elasticgrid_provider.plugins.pages import job_page, jobs_page, no_decision_page

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
        "frame-ancestors 'self'; base-uri 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


def may_read(user: Any, stored: StoredState) -> bool:
    """Whether ``user`` may read every DAG that recorded the job's decisions (module docstring)."""
    from airflow.models.dag import DagModel

    auth_manager = get_auth_manager()
    if not stored.dag_ids:
        return auth_manager.is_authorized_variable(
            method="GET", details=VariableDetails(key=stored.variable_key), user=user
        )
    return all(
        auth_manager.is_authorized_dag(
            method="GET",
            details=DagDetails(id=dag_id, team_name=DagModel.get_team_name(dag_id)),
            user=user,
        )
        for dag_id in stored.dag_ids
    )


def _airflow_root(request: Request) -> str:
    """Where Airflow itself is served: the mount's root path without our prefix."""
    root = str(request.scope.get("root_path", "")).rstrip("/")
    return root[: -len(URL_PREFIX)] if root.endswith(URL_PREFIX) else root


def _readable_job(request: Request, user: Any, job_name: str) -> tuple[StoredState, dict[str, Any]]:
    states = read_scale_states(job_name)
    if not states or not may_read(user, states[0]):
        raise HTTPException(status_code=404, detail=f"no job {job_name!r} with scale decisions")
    return states[0], job_view(states[0], epoch_now(), _airflow_root(request))


def _html(text: str) -> HTMLResponse:
    return HTMLResponse(text, headers=SECURITY_HEADERS)


def create_app() -> FastAPI:
    """Build the app (called once, on the first request)."""
    app = FastAPI(
        title="ElasticGrid scale decisions", docs_url=None, redoc_url=None, openapi_url=None
    )

    @app.get("/jobs", response_class=HTMLResponse)
    def list_jobs(request: Request, user: GetUserDep) -> HTMLResponse:
        """Every job the user may see, with its size, last decision, cost and status."""
        rows = [job_row(s) for s in read_scale_states() if may_read(user, s)]
        return _html(jobs_page(rows, _airflow_root(request)))

    @app.get("/api/jobs")
    def list_jobs_json(user: GetUserDep) -> JSONResponse:
        """The jobs list as JSON."""
        rows = [job_row(s) for s in read_scale_states() if may_read(user, s)]
        return JSONResponse({"jobs": rows}, headers=SECURITY_HEADERS)

    @app.get("/jobs/{job_name}", response_class=HTMLResponse)
    def show_job(
        request: Request,
        user: GetUserDep,
        job_name: str,
        dag_id: str | None = None,
        run_id: str | None = None,
        task_id: str | None = None,
    ) -> HTMLResponse:
        """One job's page; the decisions of ``dag_id``/``run_id``/``task_id`` highlighted."""
        _, view = _readable_job(request, user, job_name)
        wanted = {"dag_id": dag_id, "run_id": run_id, "task_id": task_id}
        highlight = {key: value for key, value in wanted.items() if value is not None}
        return _html(job_page(view, highlight or None))

    @app.get("/api/jobs/{job_name}")
    def show_job_json(request: Request, user: GetUserDep, job_name: str) -> JSONResponse:
        """One job's page data as JSON, with the raw history for scripts."""
        stored, view = _readable_job(request, user, job_name)
        return JSONResponse({**view, "history": stored.history}, headers=SECURITY_HEADERS)

    @app.get(
        "/tasks/{dag_id}/{task_id}/{run_id:path}",
        response_class=HTMLResponse,
        dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.TASK_INSTANCE))],
    )
    def show_task(
        request: Request, user: GetUserDep, dag_id: str, task_id: str, run_id: str
    ) -> HTMLResponse:
        """The task-instance tab: this check's job page, or "no scale decision here"."""
        root = _airflow_root(request)
        found = find_task_decision(read_scale_states(), dag_id, task_id, run_id)
        if found is None or not may_read(user, found[0]):
            return _html(no_decision_page(dag_id, task_id, run_id, f"{root}{URL_PREFIX}/jobs"))
        highlight = {"dag_id": dag_id, "task_id": task_id, "run_id": run_id}
        return _html(job_page(job_view(found[0], epoch_now(), root), highlight))

    return app
