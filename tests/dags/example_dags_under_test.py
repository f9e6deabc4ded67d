"""The example DAGs, in the tests' DAG folder so that Airflow's ``dag.test()`` can run them."""

from __future__ import annotations

from example_dags.elastic_rescale_check import dag as elastic_rescale_check

__all__ = ["elastic_rescale_check"]
