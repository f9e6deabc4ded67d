"""The extra link from a check or a launch to its job's "Scale decisions" page, in the UI.

Airflow runs :meth:`ScaleDecisionsLink.get_link` on the worker after each try
(templates rendered) and stores the URL as an XCom for the API server. The link opens
the plugin's UI route, ``/plugin/scale-decisions/<path>``, where the UI shows the page
``/<path>`` in its iframe (so the link opens inside the UI, with its menus); the page
authenticates with the browser's Airflow session cookie. Under ``[api] base_url`` with a
sub-path (say ``http://host/airflow``) both the route and the page carry it:
``http://host/airflow/plugin/scale-decisions/airflow/elasticgrid/jobs/<job>``; without
``base_url`` the link is root-relative.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from airflow.sdk import BaseOperatorLink

URL_PREFIX = "/elasticgrid"
"""Where the plugin's FastAPI app is mounted on the API server."""
UI_ROUTE = "scale-decisions"
"""The UI route of the Browse > Scale decisions view (``/plugin/scale-decisions``)."""
TAB_ROUTE = "scale-decision"
"""The UI route of the task-instance tab."""


def root_path(base_url: str | None) -> str:
    """The sub-path Airflow is served under (``/airflow``), from ``[api] base_url``; "" at the root."""
    return urlsplit(base_url or "").path.rstrip("/")


def ui_path(root: str, page_path: str) -> str:
    """The UI route that shows ``page_path`` (a path on the API server) in the plugin's iframe."""
    return f"{root}/plugin/{UI_ROUTE}{root}{page_path}"


def job_page_path(job_name: str, **query: str) -> str:
    """The path of ``job_name``'s page under the API server, with an optional query."""
    path = f"{URL_PREFIX}/jobs/{quote(job_name, safe='')}"
    return f"{path}?{urlencode(query)}" if query else path


class ScaleDecisionsLink(BaseOperatorLink):
    """ "Scale decisions": the page of the operator's ``job_name``, pointing at this task's run."""

    name = "Scale decisions"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        """The job page in the UI, with this task instance's decision on top; empty while the
        job name is unknown."""
        job_name = getattr(operator, "job_name", None)
        if not isinstance(job_name, str) or not job_name or "{{" in job_name:
            return ""
        from airflow.sdk.configuration import conf

        query = {"dag_id": ti_key.dag_id, "run_id": ti_key.run_id, "task_id": ti_key.task_id}
        map_index = getattr(ti_key, "map_index", -1)
        if isinstance(map_index, int) and map_index >= 0:
            query["map_index"] = str(map_index)
        base_url = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
        root = root_path(base_url)
        origin = base_url[: len(base_url) - len(root)] if root else base_url
        return origin + ui_path(root, job_page_path(job_name, **query))
