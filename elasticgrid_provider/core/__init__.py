"""The pure domain of elasticgrid: no Airflow, no I/O at import, no heavy imports.

Samples and the rolling window, the scale policy, providers, placements
and the planner, and the rendering of a placement into iroh-tinker launch
specs (iroh-tinker itself is imported only when a spec is validated).

Import from the module that holds a name (``elasticgrid_provider.core.placement``
and so on): this package imports nothing, so a rank that needs only
:mod:`.rank_environment` or :mod:`.samples` does not pay for the planner and the spec
models.
"""
