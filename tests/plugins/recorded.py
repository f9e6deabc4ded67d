"""Real scale states for the plugin tests, made by the real scheduler and ScaleState.

A job checked by a DAG: three holds for want of samples, a scale-up 2 -> 4,
then holds in cooldown, each check's record carrying the task that made it.
"""

from __future__ import annotations

from typing import Any

from elasticgrid_provider.core.samples import MetricsWindow, StepSample
from elasticgrid_provider.core.scheduler import ElasticScheduler
from elasticgrid_provider.core.state import DecisionInputs, DecisionRecord, ScaleState

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
SCHEDULER = ElasticScheduler(min_nodes=1, max_nodes=8, cooldown_s=3600, min_samples=3)


def check(
    state: ScaleState, now: float, nodes: int, samples: int, run_id: str, **context: Any
) -> ScaleState:
    """One check of a queue-bound job at ``nodes`` with ``samples`` samples in its window."""
    window = MetricsWindow(
        samples=tuple(StepSample(i, 10.0, 5.0, nodes, 100) for i in range(samples))
    )
    inputs = DecisionInputs(SCHEDULER, window, now, nodes, state.cooldown)
    decision = inputs.decide()
    record = DecisionRecord(
        decision,
        inputs,
        {
            "job_name": state.job_name,
            "job_status": "running",
            "dag_id": "audit_dag",
            "run_id": run_id,
            "task_id": "scale_check",
            "try_number": 1,
            "cost_per_hour": 1.5 * nodes,
            **({"proposed_cost_per_hour": 1.5 * decision.target_nodes} if decision.changed else {}),
            **context,
        },
    )
    after = state.after_check(window, decision.target_nodes, now)
    return after.with_record(record)


def audited_job(job_name: str = "audit-job", **context: Any) -> ScaleState:
    """Holds (min_samples) x3, scale_up 2 -> 4 in run ``grow``, holds (cooldown) x3."""
    state = ScaleState(job_name)
    for index in range(3):
        state = check(state, T0 + 60 * index, 2, index, f"early{index}", **context)
    state = check(state, T0 + 300, 2, 4, "grow", **context)
    for index in range(3):
        state = check(state, T0 + 600 + 300 * index, 4, 4, f"late{index}", **context)
    return state
