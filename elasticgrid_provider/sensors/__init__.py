"""Sensors: the scale check."""

from elasticgrid_provider.sensors.scale import ElasticScaleSensor

__all__ = ["ElasticScaleSensor"]
