"""Who may read a job, and how every plugin page answers: shared by the job and fleet pages.

* A user sees a job only when allowed to read every DAG that recorded its decisions
  (none recorded yet: its state Variable).
* HTML pages carry a Content-Security-Policy without scripts, and are never cached.
* Links are built under the root Airflow is served at, so a sub-path deployment works.
* Server paths (the jobs root, the ledger file) are shown only to admins: users the auth
  manager lets read the ``elasticgrid`` connection that names them (Admin and Op under
  the simple auth manager and FAB); every other user reads ``<jobs root>`` in their place
  (:func:`hide_paths`), in the pages and their JSON alike.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cached_property
from typing import Any

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import (
    ConnectionDetails,
    DagDetails,
    VariableDetails,
)
from fastapi import Request
from fastapi.responses import HTMLResponse

from elasticgrid_provider.links import URL_PREFIX
from elasticgrid_provider.plugins.jobs import StoredState

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
    return Access(user).may_read(stored)


class Access:
    """One request's user and what they may read, each DAG asked once (a list of 100 jobs
    asks the auth manager and the metadata DB once per DAG, not once per job)."""

    def __init__(self, user: Any) -> None:
        self.user = user
        self._dags: dict[str, bool] = {}
        self._teams: dict[str, str | None] = {}

    def know_teams(self, states: Iterable[StoredState]) -> None:
        """Look up the teams of every DAG of ``states`` in one query (before :meth:`may_read`)."""
        from airflow.models.dag import DagModel

        wanted = sorted({dag for state in states for dag in state.dag_ids} - set(self._teams))
        if wanted:
            found = DagModel.get_dag_id_to_team_name_mapping(wanted)
            self._teams.update({dag: found.get(dag) for dag in wanted})

    def _may_read_dag(self, dag_id: str) -> bool:
        if dag_id not in self._dags:
            if dag_id not in self._teams:
                from airflow.models.dag import DagModel

                self._teams[dag_id] = DagModel.get_team_name(dag_id)
            details = DagDetails(id=dag_id, team_name=self._teams[dag_id])
            self._dags[dag_id] = get_auth_manager().is_authorized_dag(
                method="GET", details=details, user=self.user
            )
        return self._dags[dag_id]

    def may_read(self, stored: StoredState) -> bool:
        """Whether the user may read every DAG that recorded the job's decisions (none yet:
        its state Variable)."""
        if not stored.dag_ids:
            return bool(
                get_auth_manager().is_authorized_variable(
                    method="GET", details=VariableDetails(key=stored.variable_key), user=self.user
                )
            )
        return all(self._may_read_dag(dag_id) for dag_id in stored.dag_ids)

    @cached_property
    def sees_paths(self) -> bool:
        """Whether the user may see server paths (:func:`may_see_paths`)."""
        return may_see_paths(self.user)


HIDDEN_ROOT = "<jobs root>"
"""What a user who may not see server paths reads in place of the jobs root."""
DEFAULT_CONN_ID = "elasticgrid_default"


def may_see_paths(user: Any, conn_id: str = DEFAULT_CONN_ID) -> bool:
    """Whether ``user`` may see server paths: the auth manager lets them read the connection
    that names the jobs root (an admin's right; never a Viewer's)."""
    return bool(
        get_auth_manager().is_authorized_connection(
            method="GET", details=ConnectionDetails(conn_id=conn_id), user=user
        )
    )


def hide_paths(value: Any, roots: Iterable[str]) -> Any:
    """``value`` (JSON: text, lists, objects) with every path under ``roots`` read as
    ``<jobs root>/...``: a copy, the original is left as it was."""
    shown = sorted({root.rstrip("/") for root in roots if root and root != "/"}, key=len)[::-1]
    if isinstance(value, str):
        for root in shown:
            value = value.replace(root, HIDDEN_ROOT)
        return value
    if isinstance(value, dict):
        return {key: hide_paths(item, shown) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [hide_paths(item, shown) for item in value]
    return value


def jobs_roots(hook: Any) -> list[str]:
    """The jobs root of ``hook`` as configured and as resolved: the server paths
    :func:`hide_paths` hides (each when it can be read here)."""
    roots = []
    for read in (
        lambda: (hook.connection_extra or {}).get("jobs_root"),
        lambda: hook.jobs_root,
    ):
        try:
            roots.append(str(read() or ""))
        except Exception:  # a root that cannot be read here is shown nowhere either
            continue
    return roots


def airflow_root(request: Request) -> str:
    """Where Airflow itself is served: the mount's root path without our prefix."""
    root = str(request.scope.get("root_path", "")).rstrip("/")
    return root[: -len(URL_PREFIX)] if root.endswith(URL_PREFIX) else root


def html_response(text: str, status_code: int = 200) -> HTMLResponse:
    """An HTML page with the plugin's security headers (no scripts, no framing elsewhere)."""
    return HTMLResponse(text, status_code=status_code, headers=SECURITY_HEADERS)
