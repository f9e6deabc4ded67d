"""Who may read a job, and how every plugin page answers: shared by the job and fleet pages.

* A user sees a job only when allowed to read every DAG that recorded its decisions
  (none recorded yet: its state Variable).
* HTML pages carry a Content-Security-Policy without scripts, and are never cached.
* Links are built under the root Airflow is served at, so a sub-path deployment works.
"""

from __future__ import annotations

from typing import Any

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails, VariableDetails
from fastapi import Request
from fastapi.responses import HTMLResponse

from elasticgrid_provider.plugins.jobs import StoredState
from elasticgrid_provider.plugins.links import URL_PREFIX

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


def airflow_root(request: Request) -> str:
    """Where Airflow itself is served: the mount's root path without our prefix."""
    root = str(request.scope.get("root_path", "")).rstrip("/")
    return root[: -len(URL_PREFIX)] if root.endswith(URL_PREFIX) else root


def html_response(text: str, status_code: int = 200) -> HTMLResponse:
    """An HTML page with the plugin's security headers (no scripts, no framing elsewhere)."""
    return HTMLResponse(text, status_code=status_code, headers=SECURITY_HEADERS)
