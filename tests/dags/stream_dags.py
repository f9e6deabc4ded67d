"""The stream DAG of the integration suite (integration/dags/stream_dags.py), here so that
Airflow's ``dag.test()`` can run it (tests/test_stream_dag.py)."""

from __future__ import annotations

from integration.dags.stream_dags import dag as stream_grows_and_shrinks

__all__ = ["stream_grows_and_shrinks"]
