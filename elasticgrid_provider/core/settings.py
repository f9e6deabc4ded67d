"""The grid settings an ElasticGrid connection configures, parsed without Airflow.

The connection's ``extra`` (what the UI form stores, one key per field)
holds ``providers`` (a JSON list, or its text from a form field or a
rendered template), ``max_spot_fraction`` (a number in [0, 1], possibly as
text; default 1) and ``prefer`` (``cost`` or ``balance``; default
``cost``). The grid comes from, in order: the task's ``providers``
argument, the connection's ``providers``, the built-in default grid; a
``providers`` argument that rendered empty (``""``, ``[]``) counts as not given,
so a template can choose the connection's grid. Every
bad value is one sentence naming where it came from, the field and the
value. :func:`grid_settings` is pure, so the hook only fetches the extra.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.planner import Prefer
from elasticgrid_provider.core.providers import DEFAULT_PROVIDERS, Provider, providers_from_dicts
from elasticgrid_provider.core.validation import (
    JsonModel,
    Text,
    choice,
    finite,
    model,
    number_from_text,
)

BUILT_IN_GRID = "the built-in default grid"
"""The ``source`` of settings whose grid is the built-in one (no task or connection set one)."""


@model
class GridSettings(JsonModel):
    """What the connection configures: the grid and the planner defaults."""

    WHERE = "connection"

    providers: tuple[Provider, ...]
    max_spot_fraction: Annotated[float, finite(0.0, 1.0)]
    prefer: Annotated[Prefer, choice(Prefer)]
    source: Text


def grid_settings(
    extra: dict[str, Any] | None, conn_id: str, inline_providers: Any = None
) -> GridSettings:
    """The grid and defaults from the task's providers, the connection's extra, or the default
    (``extra`` is None when the connection does not exist)."""
    extra = {} if extra is None else extra
    grid_source: Any = inline_providers
    if (isinstance(grid_source, str) and not grid_source.strip()) or grid_source == []:
        grid_source = None  # rendered empty: the connection's grid, or the default
    if grid_source is not None:
        source = field = "the task's providers argument"
    elif extra.get("providers") not in (None, "", []):
        grid_source = extra["providers"]
        source, field = f"connection {conn_id!r}", f"connection {conn_id!r} field providers"
    else:
        source = field = BUILT_IN_GRID
    if isinstance(grid_source, str):  # a form field or a rendered template
        try:
            grid_source = json.loads(grid_source)
        except json.JSONDecodeError as exc:
            raise ElasticGridError(f"{field} is not valid JSON: {exc.msg}") from None
    try:
        providers = DEFAULT_PROVIDERS if grid_source is None else providers_from_dicts(grid_source)
    except ElasticGridError as exc:  # say where the bad grid came from
        raise ElasticGridError(f"{field}: {exc}") from None
    fraction = extra.get("max_spot_fraction")
    return GridSettings.model_validate(
        {
            "providers": providers,
            "max_spot_fraction": 1.0 if fraction in (None, "") else number_from_text(fraction),
            "prefer": extra.get("prefer") or Prefer.COST,
            "source": source,
        },
        where=f"connection {conn_id!r} field",
    )
