"""DAGs for the PlanPlacementOperator tests."""

from __future__ import annotations

from airflow.sdk import DAG

from elasticgrid_provider.operators import PlanPlacementOperator

with DAG(dag_id="plan_default_grid", schedule=None, catchup=False):
    PlanPlacementOperator(task_id="plan", nodes="{{ dag_run.conf.get('nodes', 8) }}")

with DAG(dag_id="plan_inline_grid", schedule=None, catchup=False):
    PlanPlacementOperator(
        task_id="plan",
        nodes=5,
        prefer="balance",
        providers=[
            {"name": "a", "max_nodes": 4, "cost_per_node_hour": 1.0, "spot": False},
            {"name": "b", "max_nodes": 4, "cost_per_node_hour": 2.0, "spot": False},
        ],
    )

with DAG(
    dag_id="plan_from_decision", schedule=None, catchup=False, render_template_as_native_obj=True
):
    # nodes from a scale decision (as an upstream sensor returns it), handed in through the conf
    PlanPlacementOperator(task_id="plan", nodes="{{ dag_run.conf['decision'] }}")
