"""The callback the deadline test DAGs name (a DeadlineAlert needs an importable one)."""

from __future__ import annotations


async def deadline_missed(**kwargs) -> None:
    """Called by Airflow when a test DAG run misses its deadline; nothing to do in tests."""
