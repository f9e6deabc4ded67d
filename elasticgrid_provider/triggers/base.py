"""ElasticGridTrigger: the base of this provider's triggers.

The triggerer rebuilds a trigger from ``serialize()``'s classpath and
arguments. Each of ours is a dataclass whose fields are its arguments, so one
``serialize`` serves them all, and a field added later cannot be left out of it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from airflow.triggers.base import BaseTrigger


@dataclasses.dataclass(eq=False, repr=False)
class ElasticGridTrigger(BaseTrigger):
    """A trigger declared as a dataclass: its fields are its arguments. Subclasses are declared
    ``@dataclass(eq=False, repr=False)`` too, keeping identity equality and Airflow's ``repr``."""

    def __post_init__(self) -> None:
        super().__init__()

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Classpath and arguments, so the triggerer can rebuild this trigger."""
        classpath = f"{type(self).__module__}.{type(self).__qualname__}"
        return classpath, {
            field.name: getattr(self, field.name) for field in dataclasses.fields(self)
        }
