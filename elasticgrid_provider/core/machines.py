"""The machines of a part on cloud instances: what the engine last saw of each.

The ec2 engine writes ``machines.json`` (:data:`MACHINES_FILE`) in the part's local job
folder when it provisions and on every status; :func:`read_machines` is what the UI and the
CLI read it with. Pure: no boto3, no Airflow. The rules: docs/cli.md ("machines"),
docs/clouds.md ("Seeing the machines").
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.policy.rules import EventRule
from elasticgrid_provider.core.validation import AnyText, Choice, JsonModel, Text, choice, model

MACHINES_FILE = "machines.json"
"""The part's machines record, in its LOCAL job folder."""
SPOT_RECLAIM_CODE = "Server.SpotInstanceTermination"
"""The EC2 state reason code of an instance the cloud took back."""
ENDED_STATES = ("shutting-down", "terminated", "stopping", "stopped")


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

    @property
    def event(self) -> str:
        """What the history says happened to it: ``started``, ``terminated`` or ``reclaimed``."""
        if self.reclaimed:
            return "reclaimed"
        return "terminated" if self.state in ENDED_STATES else "started"


@model
class MachinesRecord(JsonModel):
    """The whole ``machines.json`` of a part."""

    part: Text
    launch_id: Text
    instances: tuple[Machine, ...] = ()


def read_machines_record(folder: str | os.PathLike[str]) -> MachinesRecord | None:
    """The part's machines record in ``folder``, or None when it has none; a file that does not
    validate is refused in one sentence."""
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


def instance_changes(machines: Sequence[Machine], recorded: Mapping[str, str]) -> dict[str, str]:
    """``instance id -> event`` for the machines whose event differs from ``recorded`` (what
    the history said last)."""
    return {
        machine.instance_id: machine.event
        for machine in machines
        if recorded.get(machine.instance_id) != machine.event
    }


def instances_entry(
    job_name: str,
    part: str,
    changes: Mapping[str, str],
    machines: Sequence[Machine],
    nodes: int,
    now: float,
) -> dict[str, Any]:
    """The decision-history entry of a part's instance changes (no scale decision: a hold at
    the job's size with rule :attr:`EventRule.INSTANCES`)."""
    by_id = {machine.instance_id: machine for machine in machines}
    phrases = []
    for event in ("started", "terminated", "reclaimed"):
        ids = sorted(instance for instance, found in changes.items() if found == event)
        if ids:
            described = ", ".join(
                f"{instance} ({by_id[instance].instance_type}, {by_id[instance].market})"
                for instance in ids
            )
            phrases.append(
                f"{'reclaimed by the cloud' if event == 'reclaimed' else event} {described}"
            )
    return {
        "action": "hold",
        "current_nodes": nodes,
        "target_nodes": nodes,
        "rule": EventRule.INSTANCES,
        "reason": f"part {part} of job {job_name!r}: instances {'; '.join(phrases)}",
        "decided_at": now,
        "context": {"job_name": job_name, "part": part, "instances": dict(sorted(changes.items()))},
    }
