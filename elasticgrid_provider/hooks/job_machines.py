"""A job's machines: per part of its current launch, the cloud instances the engine last saw.

One function for the CLI (``elasticgrid machines JOB``) and the job page: the parts come
from the job's launch record (the manifest), each part's instances from the machines
record its engine keeps in the part's local job folder
(:func:`~elasticgrid_provider.core.machines.read_machines`). A part on an engine without
instances (local, ssh) has none. A machines record that cannot be read becomes one
sentence in ``errors``; the other parts still show.

Each row: ``part``, ``instance_id``, ``instance_type``, ``market`` (``spot`` or
``on-demand``), ``zone``, ``state`` (the EC2 state name), ``launched_at`` (ISO-8601),
``address``, ``state_reason`` and ``reclaimed`` (the cloud took a spot instance back).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.formatting import aligned_table
from elasticgrid_provider.core.machines import read_machines

RECLAIMED_NOTE = "reclaimed by the cloud"
HEADERS = ("PART", "INSTANCE", "TYPE", "MARKET", "ZONE", "STATE", "LAUNCHED")


def part_machines(jobs_root: Path, part_names: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """The machine rows of these parts (module docstring) and the problems met reading them."""
    rows: list[dict[str, Any]] = []
    errors: list[str] = []
    for name in part_names:
        try:
            machines = read_machines(jobs_root / name)
        except ElasticGridError as error:
            errors.append(str(error))
            continue
        rows.extend(
            {"part": name, **machine.model_dump(), "reclaimed": machine.reclaimed}
            for machine in machines
        )
    return rows, errors


def job_machines(jobs_root: Path, job_name: str) -> dict[str, Any]:
    """``{"job_name", "launch_id", "parts", "machines", "errors"}`` of the job's current launch;
    one sentence when the job was never launched under ``jobs_root``."""
    from elasticgrid_provider.hooks.job_store import JobStore

    manifest = JobStore(jobs_root, None).read_manifest(job_name)
    if manifest is None:
        raise ElasticGridError(f"job {job_name!r} has no launch record under {jobs_root}")
    names = [part.name for part in manifest.parts]
    rows, errors = part_machines(jobs_root, names)
    return {
        "job_name": job_name,
        "launch_id": manifest.launch_id,
        "parts": names,
        "machines": rows,
        "errors": errors,
    }


def state_text(row: dict[str, Any]) -> str:
    """The state as shown: the EC2 state name, and why when the cloud took it back."""
    state = str(row.get("state"))
    return f"{state} ({RECLAIMED_NOTE})" if row.get("reclaimed") else state


def machines_text(view: dict[str, Any]) -> str:
    """:func:`job_machines`'s answer as text: a table, or why there is none."""
    rows = view["machines"]
    alive = sum(1 for row in rows if row.get("state") != "terminated")
    head = (
        f"job {view['job_name']}, launch {view['launch_id']}: {len(rows)} instance(s), "
        f"{alive} not terminated"
    )
    lines = [head]
    if rows:
        cells = [
            [str(row[key]) for key in ("part", "instance_id", "instance_type", "market", "zone")]
            + [state_text(row), str(row.get("launched_at"))]
            for row in rows
        ]
        lines.append(aligned_table([list(HEADERS), *cells]))
    else:
        lines.append("no cloud instances: its parts run on engines without machines")
    lines.extend(f"error: {problem}" for problem in view["errors"])
    return "\n".join(lines)
