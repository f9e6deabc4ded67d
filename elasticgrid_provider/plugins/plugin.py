"""The Airflow plugin: the mounted app, the Browse menu entry and the task-instance tab.

Shipped through the ``airflow.plugins`` entry point (always loaded; with lazy provider
discovery the provider-info ``plugins`` key alone loads nothing). Both views
open the plugin's script-free, server-rendered pages in the UI's same-origin iframe
(``url_route``). The iframe loads ``href`` as it is, so under ``[api] base_url`` with a
sub-path the hrefs carry that path (read from the configuration Airflow has loaded). The
tab passes the task's map index (``{MAP_INDEX}``, left as it is on an unmapped task).
"""

from __future__ import annotations

import threading
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from elasticgrid_provider.links import TAB_ROUTE, UI_ROUTE, URL_PREFIX, root_path


def _served_under() -> str:
    """The sub-path of ``[api] base_url`` ("" at the root): the plugin's pages live under it."""
    from airflow.configuration import conf

    return root_path(conf.get("api", "base_url", fallback="") or "")


ROOT = _served_under()
FLEET_ROUTE = "grid-fleet"
"""The UI route of the Browse > Fleet view (the grid ledger, plugins/fleet.py)."""


class LazyApp:
    """An ASGI app building the FastAPI app on its first call: only the API server loads FastAPI."""

    def __init__(self) -> None:
        self._app: Any = None
        self._lock = threading.Lock()

    def build(self) -> Any:
        """The FastAPI app, built once."""
        with self._lock:
            if self._app is None:
                from elasticgrid_provider.plugins.app import create_app

                self._app = create_app()
            return self._app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Serve one ASGI call with the built app."""
        await (self._app or self.build())(scope, receive, send)


class ElasticGridPlugin(AirflowPlugin):
    """ElasticGrid's UI: "Scale decisions" in the Browse menu and on each task instance."""

    name = "elasticgrid"
    fastapi_apps = [  # noqa: RUF012 (AirflowPlugin's attributes are plain lists)
        {"app": LazyApp(), "url_prefix": URL_PREFIX, "name": "ElasticGrid scale decisions"}
    ]
    external_views = [  # noqa: RUF012
        {
            "name": "Scale decisions",
            "href": f"{ROOT}{URL_PREFIX}/jobs",
            "destination": "nav",
            "category": "browse",
            "url_route": UI_ROUTE,
        },
        {
            "name": "Scale decision",
            "href": f"{ROOT}{URL_PREFIX}/tasks/{{DAG_ID}}/{{TASK_ID}}/{{RUN_ID}}"
            "?map_index={MAP_INDEX}",
            "destination": "task_instance",
            "url_route": TAB_ROUTE,
        },
        {
            "name": "Fleet",
            "href": f"{ROOT}{URL_PREFIX}/fleet",
            "destination": "nav",
            "category": "browse",
            "url_route": FLEET_ROUTE,
        },
    ]
