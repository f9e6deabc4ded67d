"""elasticgrid: an Airflow provider for elastic, cross-cloud training on iroh-tinker.

Import the operators from :mod:`.operators`, the sensor from :mod:`.sensors` and the
pure domain from :mod:`.core`; nothing is imported here, so provider discovery stays cheap.
"""

__version__ = "0.2.0"
"""The one place the version is written: ``pyproject.toml`` reads it (setuptools ``dynamic``),
and the provider info and ``elasticgrid --version`` report it."""
