"""A scale check's files and locks, in the order a check takes them (``docs/sensor.md``).

:class:`CheckManager` is to a check what :class:`~.launch_manager.LaunchManager` is to a
launch: the sensor hands it what the task knows, and it takes the job's lock, terminates
instances of launches no longer current, reads the job, its lost parts, the state Variable
and the new step-log lines, opens the grid ledger's transaction when the grid is shared
(the job's lock first, then the grid's, never the reverse), runs the pure
:class:`~elasticgrid_provider.core.check.ScaleCheck`, and writes the state and the ledger, or
stops what is left of a job it gives up on. A job or grid another task is busy with is
no check: the next one reads what that task wrote.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from elasticgrid_provider.core.check import (
    CheckOutcome,
    CheckVerdict,
    DeadlineChoice,
    ScaleCheck,
    TaskIdentity,
)
from elasticgrid_provider.core.clock import epoch_now
from elasticgrid_provider.core.errors import JobFailedError
from elasticgrid_provider.core.fleet.ledger import lease_for
from elasticgrid_provider.core.policy.claim import SharedGrid
from elasticgrid_provider.hooks.cloud_events import instance_entries
from elasticgrid_provider.hooks.cloud_reconcile import reconcile_quietly
from elasticgrid_provider.hooks.grid_ledger import GridLedgerStore
from elasticgrid_provider.hooks.job_reports import failure_report, lost_parts, read_step_logs
from elasticgrid_provider.hooks.launch_stop import give_up
from elasticgrid_provider.shared_root import unshared_jobs_root_message

if TYPE_CHECKING:
    from elasticgrid_provider.core.job import JobSnapshot
    from elasticgrid_provider.core.recovery import LostPart, RecoveryPolicy
    from elasticgrid_provider.core.state import ScaleState
    from elasticgrid_provider.core.step_log import StepLogChunk
    from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook
    from elasticgrid_provider.hooks.job_store import JobStore

LOCK_WAIT_S = 60.0
"""How long a check waits for a job (or the grid) that another task is busy with."""


@dataclass(frozen=True)
class CheckInputs:
    """What the task knows before the check reads anything (rendered, not yet read)."""

    task: TaskIdentity
    deadline: Callable[[], DeadlineChoice]  # resolved only when a decision is made
    recovery: Callable[[], RecoveryPolicy]  # checked only when the job lost parts
    priority: int
    poke_interval: float  # each check renews the job's lease on the grid for about this long
    samples: Any = None  # the raw argument; None: the job's own step logs
    remaining_steps: Any = None
    remaining_tokens: Any = None
    total_steps: Any = None


@dataclass(frozen=True)
class CheckResult:
    """A check that ran: its outcome (state and ledger written), when, and the lost ranks'
    log tails when the job lost parts."""

    outcome: CheckOutcome
    now: float
    lost: bool
    report: str


@dataclass(frozen=True)
class _JobReading:
    """What a check read under the job's lock, before it decides."""

    snapshot: JobSnapshot
    lost: tuple[LostPart, ...]
    report: str
    state: ScaleState
    chunks: tuple[StepLogChunk, ...]
    now: float
    said: Callable[[], None]  # logs the instance events once they are in the written state


class CheckManager:
    """Runs :class:`ScaleCheck` for one job under its lock, and writes what it decided."""

    def __init__(self, hook: ElasticGridHook, job_name: str, rules: ScaleCheck, log: Any) -> None:
        """``log``: the task's logger (``self.log`` of the sensor)."""
        self.hook = hook
        self.job_name = job_name
        self.rules = rules
        self.log = log

    def check(self, inputs: CheckInputs, window_size: int) -> CheckResult | None:
        """One check (module docstring); None when the job or the grid stayed busy."""
        store = self.hook.job_store
        with store.job_lock(self.job_name, timeout=LOCK_WAIT_S) as held:
            if not held:
                self.log.info(
                    "Job %s is busy (another task holds its lock for over %.0fs); "
                    "holding until the next check.",
                    self.job_name,
                    LOCK_WAIT_S,
                )
                return None
            reconcile_quietly(store)  # instances of launches no longer current: terminated
            job = self._read_job(store, inputs, window_size)
            planner = self.hook.get_planner()

            def run(grid: SharedGrid | None) -> CheckOutcome:
                return self.rules.run(
                    job.state,
                    job.snapshot,
                    job.now,
                    task=inputs.task,
                    samples=inputs.samples,
                    chunks=job.chunks,
                    deadline=inputs.deadline,
                    remaining_steps=inputs.remaining_steps,
                    remaining_tokens=inputs.remaining_tokens,
                    total_steps=inputs.total_steps,
                    planner=planner,
                    lost=job.lost,
                    recovery=inputs.recovery() if job.lost else None,
                    grid=grid,
                )

            capacities = {p.name: p.max_nodes for p in planner.providers}
            outcome = self._run_on_the_grid(run, capacities, inputs)
            if outcome is None:
                return None
            for level, line in outcome.log:
                self.log.log(level, "%s", line)
            store.write_scale_state(outcome.state)
            job.said()  # the instance entries are in the written history
            if outcome.verdict is CheckVerdict.GIVE_UP:
                stopped, _ = give_up(store, job.snapshot.manifest, outcome.reason)
                if stopped:
                    self.log.info("Stopped what was left of job %s: %s", self.job_name, stopped)
        return CheckResult(outcome, job.now, bool(job.lost), job.report)

    def _read_job(self, store: JobStore, inputs: CheckInputs, window_size: int) -> _JobReading:
        """Under the job's lock: the job, its lost parts, its state with the instance events
        since the last check, and the new step-log lines; a job that cannot be checked fails."""
        snapshot = store.job_snapshot(self.job_name)
        jobs_root = str(self.hook.jobs_root)
        if snapshot is None:
            unshared = unshared_jobs_root_message(self.job_name, self.hook.jobs_root)
            raise JobFailedError(
                self.rules.failure(None, jobs_root=jobs_root, unshared_message=unshared)
            )
        # only a launch confirmed running can lose parts (a down one fails here)
        lost, report = lost_parts(store, snapshot), failure_report(store, snapshot)
        failure = self.rules.failure(snapshot, jobs_root=jobs_root, failure_report=report)
        if failure is not None and not lost:
            raise JobFailedError(failure)
        state = store.read_scale_state(self.job_name)
        now = epoch_now()
        entries, said = instance_entries(snapshot, now)  # instances started or ended
        for entry in entries:  # before the decision, which stays the newest entry
            state = state.remember_event(entry, now)
        chunks = (
            []
            if inputs.samples is not None
            else read_step_logs(store, snapshot, state, tail=window_size)
        )
        return _JobReading(snapshot, lost, report, state, tuple(chunks), now, said)

    def _run_on_the_grid(
        self,
        run: Callable[[SharedGrid | None], CheckOutcome],
        capacities: dict[str, int],
        inputs: CheckInputs,
    ) -> CheckOutcome | None:
        """``run`` inside the grid ledger's transaction (its changes written back), or
        without a grid when there is no ledger; None when the grid stayed busy."""
        ledger = GridLedgerStore(self.hook.jobs_root)
        if not ledger.path.exists():  # no shared grid: no ledger read or written
            return run(None)
        try:
            with ledger.transaction(timeout=LOCK_WAIT_S) as held_grid:
                lease_s = lease_for(inputs.poke_interval)
                grid = SharedGrid(held_grid.ledger, capacities, inputs.priority, lease_s)
                outcome = run(grid)
                if outcome.ledger is not None:
                    held_grid.ledger = outcome.ledger
                return outcome
        except TimeoutError:
            self.log.info(
                "The grid ledger is busy (its lock was held for over %.0fs); "
                "holding job %s until the next check.",
                LOCK_WAIT_S,
                self.job_name,
            )
            return None
