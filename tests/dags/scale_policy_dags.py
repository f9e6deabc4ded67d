"""A DAG for the sensor's templated ``policy=`` (tests/sensors/test_scale_policy.py)."""

from __future__ import annotations

from airflow.sdk import DAG

from elasticgrid_provider.sensors import ElasticScaleSensor
from tests.dag_settings import JOB
from tests.dag_settings import TWO_LOCAL_PROVIDERS as GRID

HANDED_IN = [{"step": step, "duration_s": 10.0, "queue_s": 6.0, "nodes": 2} for step in range(4)]

with DAG(dag_id="scale_check_templated_policy", schedule=None, catchup=False):
    ElasticScaleSensor(
        task_id="scale_check",
        job_name=JOB,
        samples=HANDED_IN,
        policy={"min_nodes": 1, "max_nodes": "{{ dag_run.conf['max_nodes'] }}"},
        poke_interval=1,
        timeout=60,
        providers=GRID,
    )
