"""Instances in the decision history: started, terminated, reclaimed.

Each scale check compares each part's ``machines.json`` (written by the ec2 engine) with what
the history said of its instances last (``machines-recorded.json`` beside it) and gives one
history entry per part that changed (:func:`~elasticgrid_provider.core.machines.instances_entry`).
The sidecar is written after the state is, so a check cut short between the two says it again
rather than never.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from elasticgrid_provider.atomic_files import read_text_map, write_json
from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.job import JobSnapshot
from elasticgrid_provider.core.machines import instance_changes, instances_entry, read_machines

RECORDED_FILE = "machines-recorded.json"


def instance_entries(
    snapshot: JobSnapshot, now: float
) -> tuple[list[dict[str, Any]], Callable[[], None]]:
    """The history entries of the parts' instance changes, and what to call once the state
    holding them is written (it records them as said)."""
    entries: list[dict[str, Any]] = []
    pending: list[tuple[Path, dict[str, str]]] = []
    for part in snapshot.parts:
        if not part.job_dir:
            continue
        folder = Path(part.job_dir)
        try:
            machines = read_machines(folder)
        except ElasticGridError:
            continue  # a record that cannot be read: the engine rewrites it on its next status
        if not machines:
            continue
        recorded = read_text_map(folder / RECORDED_FILE)
        changes = instance_changes(machines, recorded)
        if changes:
            entry = instances_entry(
                snapshot.manifest.job_name, part.name, changes, machines, snapshot.nodes, now
            )
            entries.append(entry)
            pending.append((folder, {**recorded, **changes}))

    def said() -> None:
        for folder, events in pending:
            write_json(folder / RECORDED_FILE, events)

    return entries, said
