"""The "Scale decisions" UI plugin: an audit page per job, linked from each check.

Airflow imports plugin modules in every component, so nothing here imports FastAPI
or touches the database at import time: :mod:`.plugin` mounts :class:`.plugin.LazyApp`,
which builds the FastAPI app of :mod:`.app` (the routes, behind Airflow authentication
and DAG access) on its first request. :mod:`.links` is the operator extra link (worker
side, tiny); :mod:`.jobs` reads the state Variables, whatever they hold; :mod:`.live`
reads the launch record, iroh-tinker and the task's rendered fields; :mod:`.view` builds
what a page shows; :mod:`.pages` renders it as escaped HTML, with :mod:`.chart`'s inline
SVG and :mod:`.times`' readable times. What the pages show: ``docs/ui-audit.md``.
"""
