"""StopJobOperator: stop every part of a job, on any engine; usable as a teardown task.

A thin shell over :func:`~elasticgrid_provider.hooks.launch_stop.stop_job`, the same stop
as ``elasticgrid stop``. The rules: docs/operators.md ("StopJobOperator", "The teardown
pattern").
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from elasticgrid_provider.core.errors import ElasticGridError, JobNotFoundError, JobStopError
from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook
from elasticgrid_provider.hooks.launch_stop import stop_job
from elasticgrid_provider.shared_root import unshared_jobs_root_message


class StopJobOperator(BaseOperator):
    """Stop every part of a job and record it stopped (docs/operators.md, "StopJobOperator").

    :param job_name: the job's name, as its LaunchOperator's ``job_name`` (templated).
    :param elasticgrid_conn_id: the ``elasticgrid`` connection (its jobs root).
    :return: what was stopped: ``{"job_name", "launch_id", "launch_state", "job_status",
        "parts": [{"name", "provider", "engine", "nodes", "ranks"}], "other_processes",
        "released_nodes", "nothing_left"}``.
    """

    template_fields: Sequence[str] = ("job_name",)
    ui_color = "#f4dede"

    def __init__(
        self,
        *,
        job_name: str,
        elasticgrid_conn_id: str = ElasticGridHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_name = job_name
        self.elasticgrid_conn_id = elasticgrid_conn_id
        self._killed = False

    @cached_property
    def hook(self) -> ElasticGridHook:
        """The hook, built on first use (never at DAG parse time)."""
        return ElasticGridHook(self.elasticgrid_conn_id)

    def execute(self, context: Context) -> dict[str, Any]:
        """Stop the job, log what was stopped, and return it for XCom."""
        ti = context["ti"]
        reason = f"stopped by task {ti.dag_id}.{ti.task_id} (run {ti.run_id})"
        self.log.info("Stopping job %s under %s.", self.job_name, self.hook.jobs_root)
        try:
            report = stop_job(
                self.hook.job_store, self.job_name, reason, cancelled=self._was_killed
            )
        except JobNotFoundError as exc:  # a state Variable but no files: say why
            unshared = unshared_jobs_root_message(self.job_name, self.hook.jobs_root)
            raise AirflowFailException(unshared or str(exc)) from None
        except ElasticGridError as exc:  # bad input: the same input fails the same way
            raise AirflowFailException(str(exc)) from None
        except JobStopError as exc:  # a retry finishes what the record says is left
            raise AirflowException(str(exc)) from None
        self.log.info("%s", report.text())
        if report.stopped and self.is_teardown:  # whatever watched the job ended first
            self.log.warning(
                "Job %s was still running when its teardown ran: the tasks that watched it "
                "(its checks, its relaunch) had all ended before it did (one failed, or the "
                "scheduler failed it), so nothing watched it since; the teardown stopped it.",
                self.job_name,
            )
        if self._killed:
            raise AirflowException(
                f"the task was killed while it stopped job {self.job_name!r}; the stop "
                f"finished first: {report.summary()}"
            )
        return report.model_dump()

    def _was_killed(self) -> bool:
        """Asked while the stop waits for the job's lock: a killed task stops waiting."""
        return self._killed

    def on_kill(self) -> None:
        """A stop waiting for the job's lock gives up; one under way goes on (docs/operators.md)."""
        self._killed = True
        self.log.info(
            "Task killed while stopping job %s: a stop still waiting for the job's lock stops "
            "nothing; one under way goes on while the task lives, its record saying 'stopping' "
            "until it is done, and the next stop finishes it if this one is cut short.",
            self.job_name,
        )
