"""The policy's vocabularies: the rules a decision names, the rules that hold a change back,
the rules of recorded events, the actions and the unit of work, each a :class:`~elasticgrid_provider.core.validation.Choice` used as members.

The rules are evaluated in the order :class:`DecisionRule` lists them; what each compares
against is on the parameters' fields (:mod:`.parameters`); ``docs/policy.md`` explains them.
"""

from __future__ import annotations

from elasticgrid_provider.core.validation import Choice


class DecisionRule(Choice):
    """The rule a decision names as the one that fired, in evaluation order (``docs/policy.md``)."""

    PREEMPTED = "preempted"  # a higher-priority job asked this one to shrink (the grid ledger)
    MIN_SAMPLES = "min_samples"
    BOUNDS = "bounds"
    DEADLINE_PRESSURE = "deadline_pressure"
    DEADLINE_SLACK = "deadline_slack"
    DEMAND = "demand"
    QUEUE_BOUND = "queue_bound"
    IDLE = "idle"
    BALANCED = "balanced"


class HoldRule(Choice):
    """A rule that can hold back a scale change."""

    CEILING = "ceiling"
    FLOOR = "floor"
    DEADLINE = "deadline"
    FINAL_STRETCH = "final_stretch"
    RESTART_COST = "restart_cost"
    STABILISATION = "stabilisation"
    COOLDOWN = "cooldown"
    CAPACITY = "capacity"  # the shared grid has no free node for a scale-up


class EventRule(Choice):
    """The rule of a history entry that records an event, not a scale decision."""

    RECOVER = "recover"  # a recovery decision after lost capacity (``core/recovery.py``)
    JOB_ENDED = "job_ended"  # the job ended; the newest entry of a finished job's history
    INSTANCES = "instances"  # the cloud instances a part runs on (``core/machines.py``)


class ScaleAction(Choice):
    """What a decision asks for."""

    SCALE_UP = "scale_up"
    SCALE_DOWN = "scale_down"
    HOLD = "hold"


class WorkBasis(Choice):
    """The unit the load and the remaining work are counted in: tokens when every sample
    reports them, else steps."""

    STEPS = "steps"
    TOKENS = "tokens"
