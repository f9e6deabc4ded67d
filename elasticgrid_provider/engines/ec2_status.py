"""Instances a part lost, and why: what the ec2 engine's status tells the recovery path.

An instance of a running part that is reclaimed (state reason
``Server.SpotInstanceTermination``), ended otherwise (``terminated``/``stopped``) or gone
from DescribeInstances is lost capacity. :func:`lost_instances` names the cause of each
(``spot instance i-... reclaimed by AWS``); :func:`record_losses` writes, per rank, the cause
into ``instance-losses.json`` in the part's LOCAL job folder, and the engine's ``logs`` then
reads ``preempted: <cause>`` for those ranks: the line the recovery path takes as the cause
of a lost part (:func:`~elasticgrid_provider.core.recovery.loss_cause`), a capacity loss.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from iroh_tinker.cloud.engines.base import Node

from elasticgrid_provider.atomic_files import read_text_map, write_json
from elasticgrid_provider.core.machines import SPOT_RECLAIM_CODE
from elasticgrid_provider.engines.instances import GONE_STATES, Instance

LOSSES_FILE = "instance-losses.json"


def lost_instances(nodes: Iterable[Node], current: Iterable[Instance]) -> dict[str, str]:
    """``instance id -> cause`` for each instance of ``nodes`` that is gone or ending."""
    found = {instance.instance_id: instance for instance in current}
    causes: dict[str, str] = {}
    for instance_id in dict.fromkeys(node.env.get("instance_id") for node in nodes):
        if not instance_id:
            continue
        instance = found.get(instance_id)
        if instance is None:
            causes[instance_id] = f"instance {instance_id} reclaimed by AWS (gone from EC2)"
        elif instance.state_reason and SPOT_RECLAIM_CODE in instance.state_reason:
            causes[instance_id] = f"spot instance {instance_id} reclaimed by AWS"
        elif instance.state in GONE_STATES:
            reason = instance.state_reason or "no reason given"
            causes[instance_id] = f"instance {instance_id} was {instance.state} ({reason})"
    return causes


def record_losses(folder: Path, nodes: Iterable[Node], causes: Mapping[str, str]) -> None:
    """Write each lost rank's cause (kept from earlier probes) into the part's folder."""
    if not folder.is_dir():
        return
    recorded = read_text_map(folder / LOSSES_FILE)
    for node in nodes:
        cause = causes.get(node.env.get("instance_id") or "")
        if cause is not None:
            recorded.setdefault(str(node.rank), cause)
    write_json(folder / LOSSES_FILE, recorded)


def recorded_cause(folder: Path, rank: int) -> str | None:
    """Why ``rank``'s instance was lost, when it was."""
    return read_text_map(folder / LOSSES_FILE).get(str(rank))
