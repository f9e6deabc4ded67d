"""LaunchOperator: run a placement as an iroh-tinker job, faithfully and once.

A thin operator over the task's :class:`~elasticgrid_provider.hooks.launch_manager.LaunchManager`
(:attr:`LaunchOperator.launch_manager`): one iroh-tinker job part per provider share; a retry
attaches or resizes, never starts a second copy; the placement is reserved in the grid ledger
before anything stops or starts (a placement that no longer fits is planned again:
:mod:`~elasticgrid_provider.operators.launch_grid`); the job goes to XCom right after the
launch; ``wait_for_completion`` waits in the worker or the triggerer; ``on_kill`` stops only
what this task started; only secret ``envs`` values reach the secrets masker
(:mod:`elasticgrid_provider.core.secret_envs`). The rules: docs/operators.md ("LaunchOperator").
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any, ClassVar

from airflow.sdk import BaseOperator, Context
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from airflow.sdk.log import mask_secret

from elasticgrid_provider.core.errors import (
    ElasticGridError,
    GridCapacityError,
    JobLaunchError,
    NewerRecordError,
)
from elasticgrid_provider.core.formatting import placement_table
from elasticgrid_provider.core.launch_record import LaunchPhase
from elasticgrid_provider.core.launch_spec import LaunchOptions
from elasticgrid_provider.core.placement import Placement
from elasticgrid_provider.core.recovery import DEFAULT_QUARANTINE_S
from elasticgrid_provider.core.secret_envs import HiddenValues, check_secret_envs, secret_values
from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook
from elasticgrid_provider.hooks.launch_manager import (
    DEFAULT_STARTUP_GRACE_S,
    LaunchAction,
    LaunchManager,
    LaunchOutcome,
    StopAction,
)
from elasticgrid_provider.links import ScaleDecisionsLink
from elasticgrid_provider.operators.launch_grid import LaunchGrid
from elasticgrid_provider.shared_root import unshared_jobs_root_message
from elasticgrid_provider.triggers.job import (
    MIN_DEFERRAL_S,
    JobEventStatus,
    JobStatusTrigger,
    event_ended,
    job_event,
)


class LaunchOperator(BaseOperator, LaunchGrid):
    """Launch, re-attach to, or resize an elastic training job at a placement.

    :param job_name: the job's name; its parts are ``<job_name>--<provider>`` (templated).
    :param run: the command each rank runs (templated).
    :param placement: the placement, usually ``plan.output`` of a PlanPlacementOperator.
    :param procs_per_node, backend: processes per node, and the iroh-tinker backend name.
    :param envs, setup, workdir: extra environment variables for every rank, a command run once
        per part before the ranks start, and the ranks' working directory (templated).
    :param secret_envs: names of ``envs`` whose values the logs must never show, beyond the
        keys Airflow deems sensitive and URL passwords, which are masked anyway (templated).
    :param rendezvous: ``dir:/path``, ``s3://...`` or ``gs://...``; default: a folder per launch.
    :param recovery, checkpoint: iroh-tinker's settings, e.g. ``recovery={"mode": "none"}``.
    :param wait_for_completion, poll_interval: wait for the job to end, polling every N seconds.
    :param startup_grace_s: seconds the new ranks must stay up for the launch to count as started.
    :param on_shortfall: what a launch whose placement no longer fits the grid does after
        planning again: ``wait``, ``take_what_fits`` or ``fail`` (templated; None: its
        plan's, else ``wait``; :mod:`~elasticgrid_provider.operators.launch_grid`).
    :param capacity_timeout: seconds such a launch waits for nodes (templated; None: its
        plan's, else no limit).
    :param quarantine: seconds a provider that took a part away while the launch started
        stays out of the job's placements (templated, or a timedelta).
    :param deferrable: wait in the triggerer; default ``[operators] default_deferrable``.
    :param elasticgrid_conn_id: the ``elasticgrid`` connection (JobManager root).
    :return: the job's identity and state (``JobSnapshot.model_dump()``).
    """

    template_fields: Sequence[str] = (
        "job_name",
        "run",
        "placement",
        "envs",
        "secret_envs",
        "setup",
        "workdir",
        "rendezvous",
        "on_shortfall",
        "capacity_timeout",
        "quarantine",
    )
    template_fields_renderers: ClassVar[dict[str, str]] = {"placement": "json", "envs": "json"}
    ui_color = "#fdf1e8"
    operator_extra_links = (ScaleDecisionsLink(),)

    def __init__(
        self,
        *,
        job_name: str,
        run: str,
        placement: Any,
        procs_per_node: int = 1,
        backend: str = "numpy",
        envs: dict[str, str] | None = None,
        secret_envs: Sequence[str] | None = None,
        setup: str | None = None,
        workdir: str = ".",
        rendezvous: str | None = None,
        recovery: dict[str, Any] | None = None,
        checkpoint: dict[str, Any] | None = None,
        wait_for_completion: bool = False,
        poll_interval: float = 5.0,
        startup_grace_s: float = DEFAULT_STARTUP_GRACE_S,
        on_shortfall: Any = None,
        capacity_timeout: Any = None,
        quarantine: Any = DEFAULT_QUARANTINE_S,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        elasticgrid_conn_id: str = ElasticGridHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_name = job_name
        self.run = run
        self.placement = placement
        self.procs_per_node = procs_per_node
        self.backend = backend
        self.envs: Any = envs or {}
        self.secret_envs = secret_envs
        self.setup = setup
        self.workdir = workdir
        self.rendezvous = rendezvous
        self.recovery = recovery
        self.checkpoint = checkpoint
        self.wait_for_completion = wait_for_completion
        self.poll_interval = poll_interval
        self.startup_grace_s = startup_grace_s
        self.on_shortfall = on_shortfall
        self.capacity_timeout = capacity_timeout
        self.quarantine = quarantine
        self.deferrable = deferrable
        self.elasticgrid_conn_id = elasticgrid_conn_id
        self._killed = False

    @cached_property
    def hook(self) -> ElasticGridHook:
        """The hook, built on first use (never at DAG parse time)."""
        return ElasticGridHook(self.elasticgrid_conn_id)

    @cached_property
    def launch_manager(self) -> LaunchManager:
        """The manager of this task's launch of the job; ``on_kill`` stops it."""
        return self.hook.launch_manager(self.job_name)

    def render_template_fields(self, context: Context, jinja_env: Any = None) -> None:
        """Render, mask the secret ``envs`` values and hide them all from the rendered-fields
        view, before the rendered fields are stored (docs/operators.md, "Secrets")."""
        super().render_template_fields(context, jinja_env)
        if isinstance(self.envs, Mapping) and not isinstance(self.envs, HiddenValues):
            self._mask_secret_envs()
            self.envs = HiddenValues(self.envs)

    def _mask_secret_envs(self) -> None:
        """Register the secret ``envs`` values with Airflow's secrets masker; with a bad
        ``secret_envs`` (the launch fails on it) every value, failing closed."""
        from elasticgrid_provider.airflow_internals import is_sensitive_key

        try:
            names = check_secret_envs(self.secret_envs, self.envs)
        except ElasticGridError:
            names = tuple(self.envs)
        min_length = conf.getint("logging", "min_length_masked_secret", fallback=5)
        for value in secret_values(self.envs, names, is_sensitive_key, min_length):
            mask_secret(value)

    def _launch(self, placement: Placement | None = None) -> tuple[Placement, LaunchOutcome]:
        if placement is None:  # build_launch_parts refuses 0 nodes
            placement = Placement.model_validate(self.placement)
        envs = dict(self.envs) if isinstance(self.envs, Mapping) else self.envs
        options = LaunchOptions(
            run=self.run,
            workdir=self.workdir,
            procs_per_node=self.procs_per_node,
            backend=self.backend,
            envs=envs,
            setup=self.setup,
            rendezvous=self.rendezvous,
            recovery=self.recovery,
            checkpoint=self.checkpoint,
        )
        check_secret_envs(self.secret_envs, options.envs)
        # a state Variable but no files here: never start a second copy
        if self.hook.job_store.read_manifest(self.job_name) is None and (
            message := unshared_jobs_root_message(self.job_name, self.hook.jobs_root)
        ):
            raise ElasticGridError(message)
        grace = self.startup_grace_s
        outcome = self.launch_manager.launch(placement, options, startup_grace_s=grace)
        return placement, outcome

    def execute(self, context: Context) -> dict[str, Any]:
        """Launch (or attach, or resize), push the job to XCom, then optionally wait."""
        return self._launch_and_report(context)

    def execute_after_capacity(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Woken by the grid's trigger while the placement did not fit: plan again, launch."""
        return self._launch_and_report(context, event)

    def _launch_and_report(
        self, context: Context, capacity_event: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        placement, outcome = self._launch_or_fail(context, capacity_event)
        snapshot = outcome.snapshot
        attached = outcome.action is LaunchAction.ATTACHED
        if self._killed:
            # on_kill came while the launch held the job's lock and had nothing to cancel yet
            if attached:
                raise AirflowException(
                    f"the task was killed; it had attached to job {self.job_name!r}, "
                    "which keeps running"
                )
            self.launch_manager.stop()  # the launch this task started or adopted
            raise AirflowException(
                f"job {self.job_name!r} was stopped: the task was killed while it launched"
            )
        job = snapshot.model_dump()
        context["ti"].xcom_push(key="job", value=job)
        link = ScaleDecisionsLink()  # shown at once, not only when a long wait ends
        context["ti"].xcom_push(key=link.xcom_key, value=link.get_link(self, ti_key=context["ti"]))
        self._log_launch(placement, outcome)
        if not self.wait_for_completion:
            return job
        return self._wait_for_the_job(context, attached)

    def _launch_or_fail(
        self, context: Context, capacity_event: dict[str, Any] | None
    ) -> tuple[Placement, LaunchOutcome]:
        """The launch (planned again after a capacity wait); a failure gives back the plan's
        reservation and fails the task: with a retry when one may succeed, else without."""
        try:
            placement = None
            if capacity_event is not None:
                placement = self.resume_replan(context, capacity_event)
            return self._launch_recovering_startup_loss(context, placement)
        except (JobLaunchError, GridCapacityError, NewerRecordError) as exc:  # a retry may succeed
            self.give_back_plan_reservation(context)
            raise AirflowException(str(exc)) from None
        except ElasticGridError as exc:  # bad input or an engine that cannot be used
            self.give_back_plan_reservation(context)
            raise AirflowFailException(str(exc)) from None

    def _log_launch(self, placement: Placement, outcome: LaunchOutcome) -> None:
        """What the launch did (attached, adopted, launched or resized) and where each part runs."""
        snapshot = outcome.snapshot
        if outcome.action is LaunchAction.ATTACHED:
            self.log.info(
                "Job %s is already running at this placement (%d nodes, launch %s); "
                "attached, started nothing.",
                self.job_name,
                snapshot.nodes,
                snapshot.manifest.launch_id,
            )
        elif outcome.action is LaunchAction.ADOPTED:
            self.log.info(
                "Adopted job %s's launch %s (%d nodes), which an earlier try started and left "
                "unconfirmed: every rank is up; started nothing.",
                self.job_name,
                snapshot.manifest.launch_id,
                snapshot.nodes,
            )
        else:
            previous = outcome.previous_nodes
            resized = (
                f" (resized from {previous} nodes)"
                if outcome.action is LaunchAction.RESIZED
                else ""
            )
            self.log.info(
                "Launched job %s%s: %d nodes, world size %d, %d part(s) under %s, $%.2f/h, "
                "launch %s; every rank is up.\n%s",
                self.job_name,
                resized,
                snapshot.nodes,
                snapshot.manifest.world_size,
                len(snapshot.parts),
                self.hook.jobs_root,
                placement.cost_per_hour,
                snapshot.manifest.launch_id,
                placement_table(placement),
            )
        for part in snapshot.parts:
            self.log.info(
                "Part %s: %d node(s) on %s, logs in %s/logs",
                part.name,
                part.nodes,
                part.engine_target,
                part.job_dir,
            )

    def _wait_for_the_job(self, context: Context, attached: bool) -> dict[str, Any]:
        """Wait for the job to end: deferred to the triggerer, or polling in the worker."""
        if self.deferrable:
            self.defer(
                trigger=JobStatusTrigger(
                    job_name=self.job_name,
                    jobs_root=str(self.hook.jobs_root),
                    poll_interval=self.poll_interval,
                    stop_on_kill=not attached,
                    launch_id=self.launch_manager.launch_id,
                    min_wait_s=MIN_DEFERRAL_S,  # a job ending within seconds races the scheduler
                ),
                method_name="execute_complete",
            )
        while True:
            if self._killed and attached:
                raise AirflowException(
                    f"the task was killed while it waited on job {self.job_name!r}, which it "
                    "attached to and left running"
                )
            event = job_event(self.hook, self.job_name)
            if event_ended(event):
                return self.execute_complete(context, event)
            time.sleep(self.poll_interval)

    def _launch_recovering_startup_loss(
        self, context: Context, placement: Placement | None = None
    ) -> tuple[Placement, LaunchOutcome]:
        """Launch; a part a provider took away while it started is placed again without that
        provider, as a later loss is (:mod:`~elasticgrid_provider.hooks.startup_loss`); a
        placement that no longer fits the grid is planned again
        (:mod:`~elasticgrid_provider.operators.launch_grid`)."""
        from elasticgrid_provider.hooks.startup_loss import replace_lost, startup_losses

        left_out: dict[str, str] = {}
        while True:
            try:
                return self._launch(placement)
            except GridCapacityError as exc:
                if self._killed:
                    raise
                placement = placement or Placement.model_validate(self.placement)
                placement = self.replan_on_shortfall(context, placement, str(exc), left_out)
            except JobLaunchError as exc:
                lost = startup_losses(self.hook.job_store, self.job_name)
                if not lost or self._killed:
                    raise
                self.log.warning("%s", exc)  # the launch record says lost, and why
                self.remember_startup_loss(lost)
                placement = placement or Placement.model_validate(self.placement)
                planner = self.grid_planner(context, placement)
                held = self.grid_wait.capacity.held_by_others(self.job_name)
                placement = replace_lost(
                    self.job_name,
                    planner,
                    placement,
                    lost,
                    left_out=left_out,
                    held_by_others=held,
                )
                left_out = dict(placement.left_out)
                for part in lost:
                    self.log.warning(
                        "Provider %s took part %s away while it started (%s): leaving it out "
                        "and placing its nodes again.",
                        part.provider,
                        part.part,
                        part.cause,
                    )
                self.log.info(
                    "Launching job %s again:\n%s", self.job_name, placement_table(placement)
                )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Finish the wait: pass on ``done``, fail (with the log tail) on anything else."""
        status = JobEventStatus(event["status"])
        job_name = event["job_name"]
        if status.is_terminal:  # the job ended: its nodes go back to the grid
            self.launch_manager.release_nodes()
        if status is JobEventStatus.DONE:
            self.log.info("Job %s is done.", job_name)
            return event["job"]
        job = event.get("job") or {}
        if job.get("launch_state") == LaunchPhase.STOPPED and not self._killed:
            # someone stopped it on purpose (a user, a stop task): a retry would start it again
            raise AirflowFailException(
                f"job {job_name!r} was stopped before it finished "
                f"({job.get('down_reason') or 'no reason recorded'}), so this task fails "
                "without a retry: a retry would start the job again"
            )
        if status is JobEventStatus.FAILED:
            raise AirflowException(
                f"job {job_name!r} failed.\n{event.get('failure_report') or ''}".rstrip()
            )
        if status is JobEventStatus.MISSING:
            raise AirflowException(f"job {job_name!r} has no manifest; it was never launched here")
        raise AirflowException(f"job {job_name!r} was {status} before it finished")

    def on_kill(self) -> None:
        """Stop only what this task started, through its launch manager: the launch in
        progress, or the one it confirmed or adopted; a job it attached to, or was still
        waiting to launch or attach to, keeps running. A launch waiting for nodes leaves the
        grid's queue."""
        self._killed = True
        self.grid_wait.leave_on_kill(self.job_name)
        manager = self.launch_manager
        action = manager.stop_action
        if action is StopAction.CANCELLED:
            self.log.info(
                "Task killed while launching job %s: cancelling the launch.", self.job_name
            )
        elif action is StopAction.STOPPED:
            self.log.info(
                "Task killed: stopping job %s. It runs launch %s, which this task started.",
                self.job_name,
                manager.launch_id,
            )
        else:
            self.log.info(
                "Task killed: job %s was not started by this task (it attached to it, or was "
                "still waiting for the job's lock); leaving the job running.",
                self.job_name,
            )
        manager.stop()
