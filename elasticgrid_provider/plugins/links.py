"""The extra link from a check or a launch to its job's "Scale decisions" page.

Airflow runs :meth:`ScaleDecisionsLink.get_link` on the worker after each try
(templates rendered) and stores the URL as an XCom for the API server. The page
authenticates with the browser's Airflow session cookie. The URL is absolute when
``[api] base_url`` is set (Airflow served under a sub-path), else root-relative.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from airflow.sdk import BaseOperatorLink

URL_PREFIX = "/elasticgrid"
"""Where the plugin's FastAPI app is mounted on the API server."""


def job_page_path(job_name: str, **query: str) -> str:
    """The path of ``job_name``'s page under the API server, with an optional query."""
    path = f"{URL_PREFIX}/jobs/{quote(job_name, safe='')}"
    return f"{path}?{urlencode(query)}" if query else path


class ScaleDecisionsLink(BaseOperatorLink):
    """ "Scale decisions": the page of the operator's ``job_name``, pointing at this task's run."""

    name = "Scale decisions"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        """The job page URL with the DAG, run and task; empty while the job name is unknown."""
        job_name = getattr(operator, "job_name", None)
        if not isinstance(job_name, str) or not job_name or "{{" in job_name:
            return ""
        from airflow.sdk.configuration import conf

        query = {"dag_id": ti_key.dag_id, "run_id": ti_key.run_id, "task_id": ti_key.task_id}
        base_url = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
        return base_url + job_page_path(job_name, **query)
