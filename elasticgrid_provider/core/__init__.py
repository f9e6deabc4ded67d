"""The pure domain of elasticgrid: no Airflow, no I/O at import, no heavy imports.

Samples and the rolling window, the scale scheduler, providers, placements
and the planner, and the rendering of a placement into iroh-tinker launch
specs (iroh-tinker itself is imported only when a spec is validated).
"""

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.launch_spec import (
    LaunchOptions,
    LaunchPart,
    build_launch_parts,
    build_launch_spec,
)
from elasticgrid_provider.core.placement import Assignment, Placement
from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.providers import DEFAULT_PROVIDERS, Provider, providers_from_dicts
from elasticgrid_provider.core.samples import MetricsWindow, StepSample, WindowSignals
from elasticgrid_provider.core.scheduler import (
    CooldownClock,
    ElasticScheduler,
    ScaleAction,
    ScaleDecision,
)

__all__ = [
    "DEFAULT_PROVIDERS",
    "Assignment",
    "CooldownClock",
    "ElasticGridError",
    "ElasticScheduler",
    "GridPlanner",
    "LaunchOptions",
    "LaunchPart",
    "MetricsWindow",
    "Placement",
    "Provider",
    "ScaleAction",
    "ScaleDecision",
    "StepSample",
    "WindowSignals",
    "build_launch_parts",
    "build_launch_spec",
    "providers_from_dicts",
]
