"""The policy's parameters: :class:`ScalePolicy`, one frozen model, the one place they are
written.

Each field carries its help and the rules that compare against it (:class:`About`, in the
field's metadata): the CLI flags (``elasticgrid simulate``), the threshold table of :func:`~elasticgrid_provider.core.formatting.rule_text` and the sensor's
``policy=`` argument are generated from them, so adding a parameter touches this file only.
What each parameter means for the job is in ``docs/policy.md``.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, fields
from typing import Annotated, Any

from pydantic import ValidationInfo, field_validator

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.policy.memory import SCALING_LOSS_CAP
from elasticgrid_provider.core.policy.rules import DecisionRule, HoldRule
from elasticgrid_provider.core.validation import (
    JsonModel,
    NonNegative,
    Positive,
    finite,
    model,
    number_from_text,
)


@dataclass(frozen=True)
class About:
    """A parameter's one-line help and the rules that compare against it (field metadata)."""

    help: str
    rules: tuple[DecisionRule | HoldRule, ...] = ()
    flag: str | None = None
    """The CLI flag when it is not the field name with dashes."""


def _about(help_text: str, *rules: DecisionRule | HoldRule, flag: str | None = None) -> About:
    return About(help_text, rules, flag)


@model
class ScalePolicy(JsonModel):
    """The scale policy: bounds, cooldowns, thresholds, restart price and margins.

    :func:`~elasticgrid_provider.core.policy.controller.decide` applies it to one check;
    ``docs/policy.md`` says what each parameter means for the job. The fields are in the
    order the rule texts list them (:data:`RULE_THRESHOLDS`) and ``--help`` shows them.
    """

    OWNER = "policy"

    min_nodes: Annotated[
        Positive,
        _about("smallest size", DecisionRule.BOUNDS, HoldRule.FLOOR, DecisionRule.PREEMPTED),
    ] = 1
    max_nodes: Annotated[
        Positive,
        _about("largest size", DecisionRule.BOUNDS, HoldRule.CEILING),
    ] = 1024
    cooldown_s: Annotated[
        NonNegative,
        _about("seconds after a change before a scale-up", HoldRule.COOLDOWN, flag="--cooldown"),
    ] = 300.0
    scale_down_cooldown_s: Annotated[
        NonNegative | None,
        _about(
            "seconds after a change before a scale-down (default: --cooldown)",
            HoldRule.COOLDOWN,
            flag="--scale-down-cooldown",
        ),
    ] = None
    target_queue_fraction: Annotated[
        float,
        finite(0.0, 1.0),
        _about(
            "queue fraction at which to scale up", DecisionRule.QUEUE_BOUND, DecisionRule.BALANCED
        ),
    ] = 0.2
    scale_up_factor: Annotated[
        float,
        finite(1.0, exclusive_minimum=True),
        _about("growth factor, > 1", DecisionRule.QUEUE_BOUND),
    ] = 2.0
    idle_queue_fraction: Annotated[
        float,
        finite(0.0, 1.0),
        _about(
            "queue fraction at or below which the job may be idle",
            DecisionRule.IDLE,
            DecisionRule.BALANCED,
        ),
    ] = 0.05
    idle_step_fraction: Annotated[
        float,
        finite(exclusive_minimum=True),
        _about(
            "idle when the mean step is at most this share of --target-step-s", DecisionRule.IDLE
        ),
    ] = 0.5
    target_step_s: Annotated[
        float,
        finite(exclusive_minimum=True),
        _about("target step time in seconds", DecisionRule.IDLE, DecisionRule.BALANCED),
    ] = 30.0
    scale_down_factor: Annotated[
        float,
        finite(0.0, 1.0, exclusive_minimum=True, exclusive_maximum=True),
        _about("shrink factor, in (0, 1)", DecisionRule.IDLE),
    ] = 0.5
    min_samples: Annotated[
        Positive, _about("samples needed to decide", DecisionRule.MIN_SAMPLES)
    ] = 3
    deadline_margin: Annotated[
        float,
        finite(0.0, 1.0, exclusive_maximum=True),
        _about(
            "share of the time left kept spare",
            DecisionRule.DEADLINE_PRESSURE,
            DecisionRule.DEADLINE_SLACK,
        ),
    ] = 0.07
    final_stretch_s: Annotated[
        NonNegative | None,
        _about(
            "no shrink this close to the deadline (default: 4 x --startup-s)",
            DecisionRule.DEADLINE_SLACK,
            HoldRule.FINAL_STRETCH,
        ),
    ] = None
    startup_s: Annotated[
        NonNegative,
        _about(
            "seconds a resize stops progress (the restart)",
            DecisionRule.DEADLINE_PRESSURE,
            DecisionRule.DEADLINE_SLACK,
            HoldRule.DEADLINE,
            HoldRule.RESTART_COST,
        ),
    ] = 0.0
    resize_margin: Annotated[
        NonNegative, _about("how much a resize's gain must beat its price", HoldRule.RESTART_COST)
    ] = 1.0
    horizon_s: Annotated[
        float,
        finite(exclusive_minimum=True),
        _about("seconds a resize must pay off in, when work is unknown", HoldRule.RESTART_COST),
    ] = 3600.0
    headroom: Annotated[
        NonNegative, _about("capacity kept above the measured demand", DecisionRule.DEMAND)
    ] = 0.2
    scale_down_window_s: Annotated[
        NonNegative,
        _about(
            "seconds of recommendations a scale-down takes the largest of",
            HoldRule.STABILISATION,
            flag="--scale-down-window",
        ),
    ] = 600.0
    tolerance: Annotated[
        float,
        finite(0.0, 1.0, exclusive_maximum=True),
        _about("capacity changes within it are noise", DecisionRule.DEMAND, HoldRule.STABILISATION),
    ] = 0.1
    drain_s: Annotated[
        float,
        finite(exclusive_minimum=True),
        _about("seconds a backlog may take to clear", DecisionRule.DEMAND),
    ] = 1800.0
    stream_band: Annotated[
        float,
        finite(0.0, 1.0, exclusive_maximum=True),
        _about("capacity a stream keeps above its recent peak demand", DecisionRule.DEMAND),
    ] = 0.05
    peak_window_s: Annotated[
        float,
        finite(exclusive_minimum=True),
        _about(
            "seconds of a stream's newest arrivals its peak rate is read over", DecisionRule.DEMAND
        ),
    ] = 120.0
    stream_window_restarts: Annotated[
        NonNegative,
        _about(
            "a stream's scale-down window in restarts (capped at --scale-down-window)",
            HoldRule.STABILISATION,
        ),
    ] = 3.0
    scaling_loss: Annotated[
        float,
        finite(0.0, SCALING_LOSS_CAP),
        _about("prior per-node throughput lost per doubling"),
    ] = 0.1

    @field_validator("max_nodes")
    @classmethod
    def _not_below_min_nodes(cls, max_nodes: int, info: ValidationInfo) -> int:
        min_nodes = info.data.get("min_nodes", 1)
        if max_nodes < min_nodes:
            raise ElasticGridError(f"max_nodes must be at least {min_nodes}, got {max_nodes!r}")
        return max_nodes

    @property
    def effective_scale_down_cooldown_s(self) -> float:
        """The scale-down cooldown in force: ``scale_down_cooldown_s``, else ``cooldown_s``."""
        down = self.scale_down_cooldown_s
        return self.cooldown_s if down is None else down

    @property
    def effective_final_stretch_s(self) -> float:
        """The no-shrink stretch before a deadline: ``final_stretch_s``, else 4 restarts."""
        stretch = self.final_stretch_s
        return 4.0 * self.startup_s if stretch is None else stretch

    @property
    def stream_window_s(self) -> float:
        """A stream's scale-down stabilisation window: ``stream_window_restarts`` restarts of
        ``startup_s`` (what a wrong shrink costs to undo), at most ``scale_down_window_s``."""
        return min(self.scale_down_window_s, self.stream_window_restarts * self.startup_s)

    def thresholds(self) -> dict[str, Any]:
        """Every parameter as used (defaults resolved), for the audit record."""
        return {
            **self.model_dump(),
            "scale_down_cooldown_s": self.effective_scale_down_cooldown_s,
            "final_stretch_s": self.effective_final_stretch_s,
        }


POLICY_PARAMETERS = tuple(parameter.name for parameter in fields(ScalePolicy))
"""The parameters of :class:`ScalePolicy`, in order (the sensor takes each as an argument)."""


def parameter_about(name: str) -> About:
    """The :class:`About` metadata of parameter ``name``."""
    metadata = ScalePolicy.__pydantic_fields__[name].metadata  # type: ignore[attr-defined]
    return next(item for item in metadata if isinstance(item, About))


PARAMETER_DEFAULTS = {parameter.name: parameter.default for parameter in fields(ScalePolicy)}
"""Each parameter's default (``None``: derived from another, see its help)."""


def policy_argument(
    policy: ScalePolicy | dict[str, Any] | str | None, flat: dict[str, Any]
) -> ScalePolicy | dict[str, Any] | str:
    """The policy an operator was given: ``policy``, or its fields given one by one (``flat``;
    ``None`` values keep their defaults); refuses both at once. Not validated: it may hold
    templates, so :func:`policy_from` validates it when it is used."""
    given = {name: value for name, value in flat.items() if value is not None}
    if policy is not None and given:
        names = ", ".join(sorted(given))
        raise ElasticGridError(
            f"policy is given both as policy= and as keyword arguments ({names}); give one"
        )
    return given if policy is None else policy


def policy_from(policy: ScalePolicy | dict[str, Any] | str) -> ScalePolicy:
    """A :class:`ScalePolicy` from an operator's ``policy`` (after templates are rendered):
    the model itself, a dict of its fields (numeric strings read as numbers, ``None`` as the
    default), or that dict as text (JSON, or Jinja's rendering of a dict); otherwise one
    sentence naming what was wrong."""
    if isinstance(policy, ScalePolicy):
        return policy
    data: Any = policy
    if isinstance(policy, str):
        try:  # JSON, or a dict as Jinja renders it without native objects
            data = json.loads(policy)
        except ValueError:
            try:
                data = ast.literal_eval(policy)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                raise ElasticGridError(
                    f"policy must be a JSON object of the policy's fields, got {policy!r}"
                ) from None
    if not isinstance(data, dict):
        raise ElasticGridError(f"policy must be a ScalePolicy or a dict, got {data!r}")
    return ScalePolicy.model_validate(
        {name: number_from_text(value) for name, value in data.items() if value is not None}
    )


RULE_THRESHOLDS: dict[str, tuple[str, ...]] = {}
"""The parameters each rule compares against (``rule_text`` shows them), from the fields."""
for _name in POLICY_PARAMETERS:
    for _rule in parameter_about(_name).rules:
        RULE_THRESHOLDS[_rule.value] = (*RULE_THRESHOLDS.get(_rule.value, ()), _name)
