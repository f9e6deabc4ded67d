"""Real scale states for the plugin tests, made by the real transition ``ScaleState.advance``.

A job checked by a DAG (each record carries the task that made it), under
the real policy; a step takes ``20 / nodes`` seconds, half of it queued:

* 00:00, 00:01, 00:02: holds for want of samples (``min_samples``);
* 00:05: ``queue_bound`` scale-up 2 -> 4 (half of each step waits for a worker);
* 00:10, 00:15, 00:20: the queue still fills half the step: 8 nodes
  recommended, held by the ``cooldown``;
* (:func:`deadline_job`) 00:25: a deadline 10 minutes away with 150 steps
  left: ``deadline_pressure`` recommends 7 nodes, held by the ``cooldown``,
  with the projected finish times in its ``projection``.
"""

from __future__ import annotations

import copy
from typing import Any

from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.samples import StepSample
from elasticgrid_provider.core.state import ScaleState

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
SCHEDULER = ScalePolicy(min_nodes=1, max_nodes=8, cooldown_s=3600, min_samples=3, startup_s=60)
DEADLINE_AT = T0 + 2100  # 2026-01-01T00:35:00Z


def check(
    state: ScaleState,
    now: float,
    nodes: int,
    samples: int,
    run_id: str,
    *,
    deadline_at: float | None = None,
    remaining_steps: float | None = None,
    **context: Any,
) -> ScaleState:
    """One check of a queue-bound job at ``nodes``: ``samples`` new steps, half of each queued.

    A step takes ``20 / nodes`` seconds (the job scales linearly), so a bigger
    size pays for its restart.
    """
    first = int(now - T0)  # step numbers that grow from check to check
    step_s = 20.0 / nodes
    new = [StepSample(first + i, step_s, step_s / 2, nodes, 100) for i in range(samples)]
    record_context = {
        "job_name": state.job_name,
        "job_status": "running",
        "dag_id": "audit_dag",
        "run_id": run_id,
        "task_id": "scale_check",
        "try_number": 1,
        "cost_per_hour": 1.5 * nodes,
        **context,
    }
    after, _ = state.advance(
        SCHEDULER,
        new,
        nodes,
        now,
        deadline_at=deadline_at,
        remaining_steps=remaining_steps,
        context=record_context,
    )
    return after


def audited_job(job_name: str = "audit-job", **context: Any) -> ScaleState:
    """Holds (min_samples) x3, scale_up 2 -> 4 in run ``grow``, holds (cooldown) x3."""
    state = ScaleState(job_name)
    for index, samples in enumerate((0, 1, 1)):
        state = check(state, T0 + 60 * index, 2, samples, f"early{index}", **context)
    # the sensor prices the proposed size before it records the check
    state = check(state, T0 + 300, 2, 2, "grow", proposed_cost_per_hour=6.0, **context)
    for index, samples in enumerate((3, 1, 1)):
        state = check(state, T0 + 600 + 300 * index, 4, samples, f"late{index}", **context)
    return state


def deadline_job(job_name: str = "audit-job", **context: Any) -> ScaleState:
    """:func:`audited_job`, then a check at 00:25 with a deadline at 00:35 and 150 steps left."""
    return check(
        audited_job(job_name, **context),
        T0 + 1500,
        4,
        1,
        "deadline",
        deadline_at=DEADLINE_AT,
        remaining_steps=150,
        **context,
    )


STABILISING = {"rule": "stabilisation", "reason": "8 nodes were recommended within the last 300s"}
LAP = 10  # decisions in one lap of long_history


def long_history(entries: int, job_name: str = "long-job", **context: Any) -> dict[str, Any]:
    """The state of a long-lived job with ``entries`` decisions (a large ``history_limit``),
    as stored: laps of :data:`LAP` decisions, each a hold for want of samples, a scale-up,
    then eight holds at 4 nodes that alternate between the rules holding them back
    (cooldown; cooldown and stabilisation), so the state cannot fold them itself. The
    records are :func:`audited_job`'s, re-timed a minute apart, each with its own run id."""
    data = audited_job(job_name, **context).model_dump()
    short, grow, held = data["history"][:3]
    alternate = {**held, "held_by": [*held["held_by"], STABILISING]}
    lap = [short, grow, *([held, alternate] * 4)]
    history = []
    for number in range(entries):
        entry = copy.deepcopy(lap[number % LAP])
        entry.pop("hold_run", None)
        entry["decided_at"] = T0 + 60.0 * number
        entry["context"]["run_id"] = f"run-{number}"
        history.append(entry)
    return {**data, "history": history, "updated_at": T0 + 60.0 * entries}
