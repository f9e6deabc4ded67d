"""Operators: plan a placement, launch (or resize) a job, stop it."""

from elasticgrid_provider.operators.launch import LaunchOperator
from elasticgrid_provider.operators.plan import PlanPlacementOperator
from elasticgrid_provider.operators.stop import StopJobOperator

__all__ = ["LaunchOperator", "PlanPlacementOperator", "StopJobOperator"]
