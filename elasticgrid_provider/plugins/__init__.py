"""The "Scale decisions" UI plugin: an audit page per job, linked from each check.

Airflow imports plugin modules in every component, so nothing here imports FastAPI
or touches the database at import time: :mod:`.plugin` mounts :class:`.plugin.LazyApp`,
which builds the FastAPI app of :mod:`.app` (the routes, behind Airflow authentication
and DAG access) on its first request (the operator extra link that opens it is
:mod:`elasticgrid_provider.links`, beside the operators); :mod:`.state_cache` reads the state Variables (parsed once per change) and
:mod:`.jobs` reads them whatever they hold; :mod:`.live` reads the launch record,
iroh-tinker and the task's rendered fields; :mod:`.access` decides who reads what (server
paths only for admins); :mod:`.view` builds what a page shows, :mod:`.timeline` its
folded, paged timeline; :mod:`.pages` renders it as escaped HTML, with :mod:`.chart`'s
inline SVG and :mod:`.times`' readable times; :mod:`.fleet` is the Fleet page. What the
pages show: ``docs/ui-audit.md``.
"""
