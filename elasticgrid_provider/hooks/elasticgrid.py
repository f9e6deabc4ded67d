"""ElasticGridHook: the ``elasticgrid`` connection, its settings, and the parts built on them.

As the cncf.kubernetes provider keeps its client apart from the pod lifecycle, this hook
only reads the connection and builds the grid, the jobs root, its JobStore and a task's
LaunchManager. Nothing is built in ``__init__``: Airflow imports this module every few
seconds, so the connection is read, and ``iroh_tinker`` (numpy) imported, only when a task
first needs them. The rules: docs/connection.md.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.planner import GridPlanner, Prefer
from elasticgrid_provider.core.settings import GridSettings, grid_settings
from elasticgrid_provider.hooks.job_store import JobStore
from elasticgrid_provider.hooks.launch_manager import LaunchManager

if TYPE_CHECKING:
    from iroh_tinker.cloud import JobManager


class ElasticGridHook(BaseHook):
    """Reads the ``elasticgrid`` connection and builds the job store and launch managers.

    :param elasticgrid_conn_id: the connection with the grid and defaults (docs/connection.md).
    :param providers: an inline grid (list of provider dicts) that overrides the connection's.
    :param jobs_root: the JobManager root; overrides the connection's ``jobs_root``.
    """

    conn_name_attr = "elasticgrid_conn_id"
    default_conn_name = "elasticgrid_default"
    conn_type = "elasticgrid"
    hook_name = "ElasticGrid"

    def __init__(
        self,
        elasticgrid_conn_id: str = default_conn_name,
        providers: list[dict[str, Any]] | None = None,
        jobs_root: str | None = None,
    ) -> None:
        super().__init__()
        self.elasticgrid_conn_id = elasticgrid_conn_id
        self._inline_providers = providers
        self._jobs_root = jobs_root

    # -- configuration (the connection form is declared in get_provider_info) --------

    @cached_property
    def connection_extra(self) -> dict[str, Any] | None:
        """The connection's extra fields; None when the *default* connection does not exist."""
        try:
            connection = self.get_connection(self.elasticgrid_conn_id)
        except AirflowNotFoundException:
            if self.elasticgrid_conn_id != self.default_conn_name:
                raise ElasticGridError(
                    f"elasticgrid_conn_id {self.elasticgrid_conn_id!r} names a connection that "
                    f"does not exist; create it, or leave elasticgrid_conn_id unset to use "
                    f"{self.default_conn_name!r} or the built-in grid"
                ) from None
            return None
        extra = connection.extra_dejson
        return extra if isinstance(extra, dict) else {}

    @cached_property
    def settings(self) -> GridSettings:
        """The grid and defaults, from the inline grid, the connection or the built-in default."""
        extra, inline = self.connection_extra, self._inline_providers
        if extra is None:
            self.log.info(
                "Connection %r does not exist; using %s.",
                self.elasticgrid_conn_id,
                "the built-in default grid"
                if inline is None
                else "the task's providers and the default planner settings",
            )
        return grid_settings(extra, self.elasticgrid_conn_id, inline)

    def get_planner(
        self, max_spot_fraction: float | None = None, prefer: str | None = None
    ) -> GridPlanner:
        """A planner over the configured grid; arguments override the connection's defaults."""
        settings = self.settings
        spot = settings.max_spot_fraction if max_spot_fraction is None else max_spot_fraction
        chosen = settings.prefer if prefer is None else cast(Prefer, prefer)  # the model checks it
        return GridPlanner(providers=settings.providers, max_spot_fraction=spot, prefer=chosen)

    @cached_property
    def jobs_root(self) -> Path:
        """The JobManager root: explicit, from the connection, or iroh-tinker's default."""
        configured = self._jobs_root or (self.connection_extra or {}).get("jobs_root")
        if configured:
            return Path(configured).expanduser().resolve()
        from iroh_tinker.cloud import default_root

        return default_root()

    # -- what is built on the settings --------------------------------------------------

    @cached_property
    def job_store(self) -> JobStore:
        """The jobs under :attr:`jobs_root`: folders, manifests, locks, scale states."""
        return JobStore(self.jobs_root, self.log)

    @property
    def job_manager(self) -> JobManager:
        """iroh-tinker's JobManager on :attr:`jobs_root` (imported on first use)."""
        return self.job_store.job_manager

    def launch_manager(self, job_name: str, launch_id: str | None = None) -> LaunchManager:
        """A manager for one launch of ``job_name``; with ``launch_id``, of that launch (what
        a deferred task started, so that its trigger's ``on_kill`` can stop it)."""
        return LaunchManager(self.job_store, job_name, launch_id)
