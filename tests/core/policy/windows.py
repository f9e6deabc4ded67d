"""Windows of step samples the policy tests decide on, and the shared constants."""

from __future__ import annotations

from elasticgrid_provider.core.policy.decision import (
    CooldownClock,
)
from elasticgrid_provider.core.samples import (
    MetricsWindow,
    StepSample,
)

T0 = 1_700_000_000.0


def steady(
    nodes: int, *, step_s: float = 20.0, queue: float = 0.0, count: int = 3, tokens: float = 0.0
) -> MetricsWindow:
    """``count`` identical samples on ``nodes`` nodes; ``queue`` is the queued share of the step."""
    return MetricsWindow(
        samples=tuple(
            StepSample(step, step_s, queue * step_s, nodes, tokens) for step in range(count)
        )
    )


QUEUED_8 = steady(8, queue=0.8)  # 80% queued: queue-bound


BALANCED_8 = steady(8, queue=0.1)  # 20 s steps, 10% queued: neither busy nor idle


IDLE_8 = steady(8, step_s=5.0)  # 5 s steps, nothing queued: idle


FAST_4 = steady(4, step_s=2.0)  # 2 s steps on 4 nodes: used for deadline projections


RECENT_UP = CooldownClock(T0 - 120, "scale_up")


LINEAR = {"scaling_loss": 0.0}


PRIOR = {"scaling_loss": 0.1}


def closed_loop(nodes: int, step_s: float, queue_s: float = 0.0, count: int = 5) -> MetricsWindow:
    """Back-to-back steps: each step's work is there when the previous one ends."""
    return MetricsWindow(
        samples=tuple(
            StepSample(i, step_s, queue_s, nodes, 0.0, T0 - (count - 1 - i) * step_s)
            for i in range(count)
        )
    )


def stream(
    nodes: int, *, every_s: float, service_s: float, queues: list[float], tokens: float = 1000.0
) -> MetricsWindow:
    """Batches of ``tokens`` arriving every ``every_s``, each served in ``service_s``.

    ``queues`` is each batch's wait; a batch ends at arrival + wait + service.
    """
    count = len(queues)
    samples = []
    for index, wait in enumerate(queues):
        arrived = T0 - (count - index) * every_s
        samples.append(
            StepSample(index, wait + service_s, wait, nodes, tokens, arrived + wait + service_s)
        )
    return MetricsWindow(samples=tuple(samples))
