"""The machines of a part on cloud instances: what the engine last saw of each.

The ec2 engine writes ``machines.json`` (:data:`MACHINES_FILE`) in the part's LOCAL
job folder (beside the ssh engine's ``remote-status.json``) when it provisions and
on every status::

    {"part": str, "launch_id": str,
     "instances": [{"instance_id": str, "instance_type": str,
                    "market": "spot" | "on-demand", "zone": str,
                    "state": str (the EC2 state name), "launched_at": ISO-8601 str,
                    "address": str, "state_reason": str | null}]}

:func:`read_machines` is what the UI and the CLI read it with. Pure: no boto3, no
Airflow; a missing file reads as no machines, a file that does not validate is refused
in one sentence.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.validation import AnyText, Choice, JsonModel, Text, choice, model

MACHINES_FILE = "machines.json"
"""The part's machines record, in its LOCAL job folder."""
SPOT_RECLAIM_CODE = "Server.SpotInstanceTermination"
"""The EC2 state reason code of an instance the cloud took back."""


class Market(Choice):
    """How an instance is paid for."""

    SPOT = "spot"
    ON_DEMAND = "on-demand"


@model
class Machine(JsonModel):
    """One instance of a part, as the engine last saw it."""

    instance_id: Text
    instance_type: Text
    market: Annotated[Market, choice(Market)]
    zone: AnyText
    state: Text
    launched_at: AnyText
    address: AnyText
    state_reason: AnyText | None = None

    @property
    def reclaimed(self) -> bool:
        """Whether the cloud took the instance back (a spot interruption)."""
        return bool(self.state_reason and SPOT_RECLAIM_CODE in self.state_reason)


@model
class MachinesRecord(JsonModel):
    """The whole ``machines.json`` of a part."""

    part: Text
    launch_id: Text
    instances: tuple[Machine, ...] = ()


def read_machines_record(folder: str | os.PathLike[str]) -> MachinesRecord | None:
    """The part's machines record in ``folder``, or None when it has none."""
    path = Path(folder) / MACHINES_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise ElasticGridError(f"machines record {str(path)!r} cannot be read: {error}") from None
    try:
        data: Any = json.loads(text)
    except ValueError:
        raise ElasticGridError(f"machines record {str(path)!r} is not JSON") from None
    return MachinesRecord.model_validate(data, where=f"machines record {str(path)!r}")


def read_machines(folder: str | os.PathLike[str]) -> list[Machine]:
    """The machines of the part whose LOCAL job folder is ``folder`` (empty when it has none)."""
    record = read_machines_record(folder)
    return list(record.instances) if record is not None else []
