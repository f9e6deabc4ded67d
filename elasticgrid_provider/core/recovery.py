"""Recovering a job that lost capacity: what counts as lost, the quarantine, the budget.

A scale check that finds part of a confirmed launch lost (:func:`part_is_lost`, its cause from
:func:`loss_cause`) decides ``recover`` instead of failing: the job is re-planned on the grid
without the lost providers, which stay quarantined for ``quarantine_s`` (:class:`RecoveryMemory`
in the job's scale state), at its size within ``[min_nodes, max_nodes]`` or smaller; at most
``max_recoveries`` within ``recovery_window_s``, once per launch, else ``give_up`` in one
sentence (:func:`decide_recovery`). The rules: docs/recovery.md ("Recovering from lost
capacity"). Pure: no Airflow, no iroh-tinker, no file access; this module never imports the
state, which keeps the memory (:func:`elasticgrid_provider.core.state.remember_recovery`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY
from functools import partial
from typing import TYPE_CHECKING, Annotated, Any

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.formatting import decision_summary, iso_time
from elasticgrid_provider.core.job import JobStatus
from elasticgrid_provider.core.policy.rules import EventRule
from elasticgrid_provider.core.records import Extras, ForwardCompatible, extras_field
from elasticgrid_provider.core.step_log import cut_report
from elasticgrid_provider.core.validation import (
    AboveZero,
    AnyText,
    Choice,
    Count,
    Finite,
    JsonModel,
    NonNegative,
    Positive,
    choice,
    model,
)

if TYPE_CHECKING:
    from elasticgrid_provider.core.placement import Placement
    from elasticgrid_provider.core.planner import GridPlanner

DEFAULT_MAX_RECOVERIES = 3
DEFAULT_RECOVERY_WINDOW_S = 3600.0
DEFAULT_QUARANTINE_S = 1800.0
PAST_RECOVERIES_KEPT = 50  # the window needs only the recent ones
CAUSE_PATTERN = re.compile(
    "preempt|reclaim|evict|interrupt|terminat|killed|signal|out of memory|error|exception",
    re.IGNORECASE,
)
"""Words that make a rank-log line the cause of a loss (the last such line is taken)."""
CAPACITY_PATTERN = re.compile("preempt|reclaim|evict|interrupt|terminat|capacity", re.IGNORECASE)
"""Words that make a cause a loss of capacity, not a program's failure (:func:`is_capacity_loss`)."""


class RecoveryAction(Choice):
    """What a recovery decision does: recover, give up, or wait (docs/recovery.md)."""

    RECOVER = "recover"  # relaunch on what is left of the grid
    GIVE_UP = "give_up"  # budget spent or too little left: stop the rest, fail
    WAIT = "wait"  # the recovery of this launch was decided already

    @property
    def is_recorded(self) -> bool:
        """Whether the decision enters the history (``wait`` records nothing)."""
        return self is not RecoveryAction.WAIT


@model
class LostPart(JsonModel):
    """One part of a job whose ranks are gone: which, where (``ranks``: global ranks), and why."""

    _: KW_ONLY
    part: AnyText
    provider: AnyText
    nodes: Positive
    ranks: tuple[Count, ...] = ()
    cause: AnyText


@model
class QuarantineEntry(ForwardCompatible, JsonModel):
    """A provider left out of every placement until ``until`` (epoch seconds), and why."""

    provider: AnyText
    since: Finite
    until: Finite
    reason: AnyText
    extras: Extras = extras_field()


@model
class PastRecovery(ForwardCompatible, JsonModel):
    """A recovery that was decided: when, and for which launch."""

    at: Finite
    launch_id: AnyText
    extras: Extras = extras_field()


@model
class RecoveryMemory(ForwardCompatible, JsonModel):
    """What the job's scale state keeps about recoveries: quarantines and past recoveries."""

    WHERE = "scale state recovery"

    quarantine: tuple[QuarantineEntry, ...] = ()
    recoveries: tuple[PastRecovery, ...] = ()
    extras: Extras = extras_field()

    def active_quarantine(self, now: float) -> tuple[QuarantineEntry, ...]:
        """The quarantines that still hold at ``now``, one per provider (the longest)."""
        longest: dict[str, QuarantineEntry] = {}
        for entry in sorted(self.quarantine, key=lambda entry: entry.until, reverse=True):
            if entry.until > now:
                longest.setdefault(entry.provider, entry)
        return tuple(longest[name] for name in sorted(longest))

    def recoveries_within(self, now: float, window_s: float) -> tuple[PastRecovery, ...]:
        """The recoveries decided within the last ``window_s`` seconds."""
        return tuple(past for past in self.recoveries if now - past.at < window_s)

    def decided_for(self, launch_id: str) -> PastRecovery | None:
        """The recovery already decided for ``launch_id``, if any."""
        return next((past for past in self.recoveries if past.launch_id == launch_id), None)

    @classmethod
    def model_validate(cls, data: Any, *, where: str | None = None) -> RecoveryMemory:
        """A stored memory (None or absent: no recoveries yet); raise in one sentence."""
        return NO_RECOVERIES if data is None else super().model_validate(data, where=where)


NO_RECOVERIES = RecoveryMemory()


def quarantine_reasons(entries: Sequence[QuarantineEntry]) -> dict[str, str]:
    """``{provider: "quarantined until <time>: <reason>"}`` for planners and placements."""
    return {
        entry.provider: f"quarantined until {iso_time(entry.until)}: {entry.reason}"
        for entry in entries
    }


@model
class RecoveryPolicy(JsonModel):
    """How many recoveries, over how long, and how long a provider stays quarantined."""

    OWNER = "recovery policy"

    max_recoveries: Count = DEFAULT_MAX_RECOVERIES
    recovery_window_s: AboveZero = DEFAULT_RECOVERY_WINDOW_S
    quarantine_s: NonNegative = DEFAULT_QUARANTINE_S


@model
class RecoveryDecision(JsonModel):
    """A recovery event (``recover``: relaunch on what is left; ``give_up``; ``wait``): a decision
    record's fields, the lost parts, the quarantine after it, the budget, the new placement."""

    _: KW_ONLY
    action: Annotated[RecoveryAction, choice(RecoveryAction)]
    rule: Annotated[EventRule, choice(EventRule, EventRule.RECOVER)] = EventRule.RECOVER
    current_nodes: Positive
    target_nodes: Count
    reason: AnyText
    decided_at: Finite
    launch_id: AnyText
    lost: tuple[LostPart, ...]
    quarantine: tuple[QuarantineEntry, ...] = ()
    recoveries_in_window: Count
    policy: RecoveryPolicy
    placement: dict[str, Any] | None = None

    def as_record(self, context: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Plain JSON: the record (with ``context``, its ``readable`` summary added)."""
        record = self.model_dump()
        quarantine = [
            {**entry.model_dump(), "until_iso": iso_time(entry.until)} for entry in self.quarantine
        ]
        readable = {"summary": decision_summary(record), "decided_at": iso_time(self.decided_at)}
        record["context"] = {**(context or {}), "readable": {**readable, "quarantine": quarantine}}
        return record


def part_is_lost(status: str, ranks_down: Sequence[int]) -> bool:
    """A part is lost when it failed, or runs with ranks down that did not finish."""
    return status == JobStatus.FAILED or (status == JobStatus.RUNNING and bool(ranks_down))


def loss_cause(log_tail: str, engine_error: str | None) -> str:
    """Why a part was lost: the last rank-log line naming a cause, else the engine's error."""
    for line in reversed(log_tail.splitlines()):
        text = line.strip()
        if CAUSE_PATTERN.search(text):
            return cut_report(text, 200)
    if engine_error:
        return f"its ranks stopped ({cut_report(engine_error, 200)})"
    return "its ranks stopped and their logs give no reason"


def is_capacity_loss(cause: str) -> bool:
    """Whether a cause (:func:`loss_cause`) is a notice that capacity was taken away
    (``preempted: ...``), as opposed to a program that failed or ranks gone without a word."""
    return bool(CAPACITY_PATTERN.search(cause))


def taken_away(lost: Sequence[LostPart]) -> tuple[LostPart, ...]:
    """The lost parts a provider took away (their cause is a capacity notice,
    :func:`is_capacity_loss`), or every lost part when none has one. The ranks of a job's
    other parts die with a part taken away (a peer's connection refused, a collective timing
    out): they are relaunched with the job, but their providers are not to blame."""
    taken = tuple(part for part in lost if is_capacity_loss(part.cause))
    return taken or tuple(lost)


def describe_loss(lost: LostPart) -> str:
    """``part P (provider 'x', global rank 3: cause)``: a lost part in a sentence."""
    ranks = ", ".join(map(str, lost.ranks))
    where = f", global rank{'s' if len(lost.ranks) > 1 else ''} {ranks}" if lost.ranks else ""
    return f"part {lost.part} (provider {lost.provider!r}{where}: {lost.cause})"


def decide_recovery(
    *,
    job_name: str,
    launch_id: str,
    lost: Sequence[LostPart],
    current_nodes: int,
    min_nodes: int,
    max_nodes: int,
    memory: RecoveryMemory,
    policy: RecoveryPolicy,
    planner: GridPlanner,
    now: float,
) -> RecoveryDecision:
    """Decide how to recover ``launch_id`` of ``job_name`` from its ``lost`` parts
    (docs/recovery.md)."""
    if not lost:
        raise ElasticGridError(f"job {job_name!r} lost no part; there is nothing to recover")
    lost = tuple(lost)
    in_window = memory.recoveries_within(now, policy.recovery_window_s)
    decided = partial(
        RecoveryDecision,
        current_nodes=current_nodes,
        decided_at=now,
        launch_id=launch_id,
        lost=lost,
        recoveries_in_window=len(in_window),
        policy=policy,
    )
    earlier = memory.decided_for(launch_id)
    if earlier is not None:
        reason = (
            f"the recovery of launch {launch_id} was decided at {iso_time(earlier.at)}; "
            "waiting for the relaunch"
        )
        active = memory.active_quarantine(now)
        return decided(
            action=RecoveryAction.WAIT, target_nodes=current_nodes, reason=reason, quarantine=active
        )
    fresh = _fresh_quarantine(lost, policy, now)
    quarantine = RecoveryMemory(quarantine=memory.quarantine + fresh).active_quarantine(now)
    what = f"job {job_name!r} lost " + ", ".join(map(describe_loss, lost))
    spent = _budget_spent(len(in_window), policy)
    if spent is not None:
        reason = (
            f"{what} and {spent}, so it is not recovered again; relaunch it with "
            "LaunchOperator once the capacity is back"
        )
        return decided(
            action=RecoveryAction.GIVE_UP, target_nodes=0, reason=reason, quarantine=quarantine
        )
    placement, target, problem = _recovery_placement(
        planner, quarantine_reasons(quarantine), current_nodes, min_nodes, max_nodes
    )
    if placement is None:
        reason = f"{what} and no capacity is left to recover it: {problem}"
        return decided(
            action=RecoveryAction.GIVE_UP, target_nodes=0, reason=reason, quarantine=quarantine
        )
    where = ", ".join(f"{name} {count}" for name, count in placement.nodes_by_provider().items())
    names = ", ".join(repr(entry.provider) for entry in fresh)
    quarantined = f"quarantined {names} for {policy.quarantine_s:g}s; " if fresh else ""
    reason = (
        f"{what}; {quarantined}relaunching {target} node(s) on {where} from the last "
        f"checkpoint (recovery {len(in_window) + 1} of at most {policy.max_recoveries} "
        f"within {policy.recovery_window_s:g}s)"
    )
    return decided(
        action=RecoveryAction.RECOVER,
        target_nodes=target,
        reason=reason,
        quarantine=quarantine,
        placement=placement.model_dump(),
    )


def _fresh_quarantine(
    lost: Sequence[LostPart], policy: RecoveryPolicy, now: float
) -> tuple[QuarantineEntry, ...]:
    """An entry for each provider that took a part away (:func:`taken_away`), for
    ``policy.quarantine_s`` seconds (none when that is 0)."""
    if policy.quarantine_s <= 0:
        return ()
    until = now + policy.quarantine_s
    return tuple(
        QuarantineEntry(part.provider, now, until, f"lost part {part.part}: {part.cause}")
        for part in taken_away(lost)
    )


def _budget_spent(recoveries_in_window: int, policy: RecoveryPolicy) -> str | None:
    """Why no recovery is left within the window, or None when one is."""
    if recoveries_in_window < policy.max_recoveries:
        return None
    if policy.max_recoveries == 0:
        return "recovery is off (max_recoveries=0)"
    return (
        f"already recovered {recoveries_in_window} time(s) within the last "
        f"{policy.recovery_window_s:g}s (max_recoveries={policy.max_recoveries})"
    )


def _recovery_placement(
    planner: GridPlanner,
    leave_out: Mapping[str, str],
    current_nodes: int,
    min_nodes: int,
    max_nodes: int,
) -> tuple[Placement | None, int, str]:
    """The job's size (within its bounds) on the grid without ``leave_out``: the placement,
    the size, and why there is none ("" when there is)."""
    left = sum(p.max_nodes for p in planner.providers if p.name not in leave_out)
    target = min(max(current_nodes, min_nodes), max_nodes, left)
    if target < max(min_nodes, 1):
        problem = (
            f"the grid without the quarantined providers ({', '.join(sorted(leave_out)) or '-'}) "
            f"holds {left} node(s), fewer than min_nodes {min_nodes}"
        )
        return None, target, problem
    try:
        return planner.plan(target, leave_out=dict(leave_out)), target, ""
    except ElasticGridError as error:
        return None, target, str(error)


def quarantine_from_record(record: Any) -> dict[str, str]:
    """``{provider: why}`` from a decision record's quarantine (top level or ``context``):
    what a ``PlanPlacementOperator`` given ``nodes=check.output`` leaves out."""
    if not isinstance(record, Mapping):
        return {}
    context = record.get("context")
    entries = record.get("quarantine")
    if entries is None and isinstance(context, Mapping):
        entries = context.get("quarantine")
    memory = RecoveryMemory.model_validate({"quarantine": entries or ()}, where="decision record")
    return quarantine_reasons(memory.quarantine)
