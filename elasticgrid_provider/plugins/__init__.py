"""The "Scale decisions" UI plugin: an audit page per job, linked from each check.

Airflow imports plugin modules in every component, so nothing here imports FastAPI or
touches the database at import time: :mod:`.plugin` mounts :class:`.plugin.LazyApp`, which
builds the app of :mod:`.app` on its first request. What the pages show: docs/ui-audit.md.
"""
