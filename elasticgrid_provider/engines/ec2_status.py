"""Instances a part lost, and why: what the ec2 engine's status tells the recovery path.

:func:`record_losses` writes each lost rank's cause into the part's local folder, so the
engine's ``logs`` reads ``preempted: <cause>`` for it: the line the recovery path takes as
the cause of a lost part. :func:`keep_last_logs` keeps each rank's last lines before its
instances (and the logs on them) are terminated. The rules: docs/clouds.md ("Spot", "What
the engine does").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from iroh_tinker.cloud.engines.base import Node

from elasticgrid_provider.atomic_files import read_text_map, write_json
from elasticgrid_provider.core.machines import SPOT_RECLAIM_CODE
from elasticgrid_provider.engines.instances import GONE_STATES, Instance

LOSSES_FILE = "instance-losses.json"
LAST_LOGS_FILE = "last-rank-logs.json"  # each rank's log tail, read before its instance ends
LAST_LOG_LINES = 200


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
    return recorded_causes(folder).get(str(rank))


def recorded_causes(folder: Path) -> dict[str, str]:
    """Every lost rank's cause (:func:`record_losses`), by rank as text."""
    return read_text_map(folder / LOSSES_FILE)


def keep_last_logs(folder: Path, read_tail: Callable[[int], str], ranks: Iterable[int]) -> None:
    """Copy each rank's last :data:`LAST_LOG_LINES` lines (``read_tail(rank)``) into the part's
    local job folder before its instances end, once per launch (a later look, when the
    instances are gone, reads nothing that could replace them); a rank whose log cannot be
    read, or is empty, keeps none."""
    path = folder / LAST_LOGS_FILE
    if path.exists() or not folder.is_dir():
        return
    tails = {}
    for rank in ranks:
        try:
            tail = read_tail(rank)
        except Exception:  # an instance gone already: nothing more to keep
            continue
        if tail:
            tails[str(rank)] = tail
    if tails:
        write_json(path, tails)


def kept_log(folder: Path, rank: int, tail: int) -> str | None:
    """The last ``tail`` lines kept of ``rank``'s log (:func:`keep_last_logs`), or None."""
    text = read_text_map(folder / LAST_LOGS_FILE).get(str(rank))
    if text is None:
        return None
    return "".join(text.splitlines(keepends=True)[-tail:]) if tail > 0 else ""


def forget_last_launch(folder: Path) -> None:
    """A new launch of the part starts with no record of an earlier one's lost instances or
    kept logs (the part's folder is the same from launch to launch)."""
    for name in (LOSSES_FILE, LAST_LOGS_FILE):
        (folder / name).unlink(missing_ok=True)
