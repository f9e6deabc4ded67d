"""elasticgrid: an Airflow provider for elastic, cross-cloud training on iroh-tinker.

Import the operators from :mod:`elasticgrid_provider.operators`, the sensor
from :mod:`elasticgrid_provider.sensors`, the pure domain from
:mod:`elasticgrid_provider.core`. Nothing is imported here, so that Airflow's
provider discovery stays cheap.
"""

__version__ = "0.2.0"
"""The one place the version is written: ``pyproject.toml`` reads it (setuptools ``dynamic``),
and the provider info and ``elasticgrid --version`` report it."""
