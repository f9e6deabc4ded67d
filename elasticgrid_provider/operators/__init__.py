"""Operators: plan a placement, launch (or resize) a job."""

from elasticgrid_provider.operators.launch import LaunchOperator
from elasticgrid_provider.operators.plan import PlanPlacementOperator

__all__ = ["LaunchOperator", "PlanPlacementOperator"]
