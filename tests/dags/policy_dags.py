"""DAGs for the policy tests: one scale check per run on handed-in samples."""

from __future__ import annotations

from airflow.sdk import DAG

from elasticgrid_provider.sensors import ElasticScaleSensor
from tests.dag_settings import JOB
from tests.dag_settings import TWO_LOCAL_PROVIDERS as GRID

# what `elasticgrid simulate --timeline` is given in tests/cli/test_cli_matches_sensor.py
POLICY_CHECK = {"min_nodes": 1, "max_nodes": 8, "cooldown_s": 0.0}

with DAG(dag_id="policy_single_check", schedule=None, catchup=False):
    # timeout 0: exactly one check per run, as the timeline decides once per sample
    ElasticScaleSensor(
        task_id="scale_check",
        job_name=JOB,
        providers=GRID,
        samples="{{ dag_run.conf['samples'] | tojson }}",
        poke_interval=1,
        timeout=0,
        soft_fail=True,
        **POLICY_CHECK,
    )
