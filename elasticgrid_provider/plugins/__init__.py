"""The "Scale decisions" UI plugin: an audit page per job, linked from each check.

Airflow imports plugin modules in every component (scheduler, workers, task
runners), so nothing here imports FastAPI or touches the database at import
time: :mod:`.plugin` declares the plugin and mounts :class:`.plugin.LazyApp`,
which builds the FastAPI app of :mod:`.app` on its first request.

* :mod:`.links`: the operator extra link to a job's page (worker side, tiny);
* :mod:`.jobs`: reads the jobs' state Variables and builds what a page shows;
* :mod:`.pages`: renders it as escaped HTML with an inline SVG chart;
* :mod:`.app`: the routes, each behind Airflow authentication and DAG access.
"""
