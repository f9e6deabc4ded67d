"""What a launched job is, and how its state is summarised.

A job is launched as one iroh-tinker job *part* per provider share (SPEC
6.3). The :class:`JobManifest` is written next to the parts before any part
starts, so a retry that finds running parts knows they are ours and never
starts a second copy. A :class:`JobSnapshot` joins the manifest with each
part's live status into one status word:

* ``failed``   when any part failed;
* ``running``  when any part still runs (and none failed);
* ``done``     when every part finished successfully;
* ``stopped``  when the parts were stopped (by a resize, ``on_kill`` or a user);
* ``launching`` while the manifest exists but no part has reported yet.

The manifest also records the launch's phase (``state``: ``starting``,
``running`` once confirmed, ``down`` with ``down_reason``; see
:mod:`elasticgrid_provider.core.launch_record`) and salted fingerprints of
what it runs, so attach can compare without keeping ``envs`` values at rest.
A manifest written before these fields existed reads as a confirmed launch
with no fingerprints (so the next launch relaunches rather than attaches).

Everything here is plain data that round-trips through JSON, so it can be
pushed to XCom and shown in logs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from elasticgrid_provider.core.launch_record import LAUNCH_RUNNING
from elasticgrid_provider.core.placement import Placement

JOB_STATUSES = ("launching", "running", "done", "failed", "stopped")


@dataclass(frozen=True)
class PartRecord:
    """One iroh-tinker job that runs one provider's share of the nodes."""

    name: str
    provider: str
    engine_target: str
    nodes: int
    rank_offset: int
    spec_path: str
    status: str = "launching"
    job_dir: str = ""
    last_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON for the manifest and XCom."""
        return {
            "name": self.name,
            "provider": self.provider,
            "engine_target": self.engine_target,
            "nodes": self.nodes,
            "rank_offset": self.rank_offset,
            "spec_path": self.spec_path,
            "status": self.status,
            "job_dir": self.job_dir,
            "last_error": self.last_error,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PartRecord:
        """Inverse of :meth:`to_dict`."""
        return cls(**data)


@dataclass(frozen=True)
class JobManifest:
    """Which parts make up a job, at which placement, from which launch."""

    job_name: str
    launch_id: str
    launched_at: str
    placement: Placement
    world_size: int
    procs_per_node: int
    rendezvous: str
    run: str
    parts: tuple[PartRecord, ...] = field(default_factory=tuple)
    state: str = LAUNCH_RUNNING
    down_reason: str | None = None
    fingerprint_salt: str = ""
    fingerprints: dict[str, str] = field(default_factory=dict, hash=False)

    @property
    def nodes(self) -> int:
        """The job's size in nodes (what the scheduler calls the current size)."""
        return self.placement.total_nodes

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON, written as ``manifest.json`` in the job's folder."""
        return {
            "job_name": self.job_name,
            "launch_id": self.launch_id,
            "launched_at": self.launched_at,
            "placement": self.placement.to_dict(),
            "world_size": self.world_size,
            "procs_per_node": self.procs_per_node,
            "rendezvous": self.rendezvous,
            "run": self.run,
            "parts": [part.to_dict() for part in self.parts],
            "state": self.state,
            "down_reason": self.down_reason,
            "fingerprint_salt": self.fingerprint_salt,
            "fingerprints": dict(self.fingerprints),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobManifest:
        """Inverse of :meth:`to_dict`."""
        return cls(
            job_name=data["job_name"],
            launch_id=data["launch_id"],
            launched_at=data["launched_at"],
            placement=Placement.from_dict(data["placement"]),
            world_size=int(data["world_size"]),
            procs_per_node=int(data["procs_per_node"]),
            rendezvous=data["rendezvous"],
            run=data["run"],
            parts=tuple(PartRecord.from_dict(part) for part in data["parts"]),
            state=data.get("state", LAUNCH_RUNNING),
            down_reason=data.get("down_reason"),
            fingerprint_salt=data.get("fingerprint_salt", ""),
            fingerprints=dict(data.get("fingerprints") or {}),
        )


def overall_status(part_statuses: list[str]) -> str:
    """Fold the parts' status words into the job's (rules in the module docstring)."""
    if not part_statuses:
        return "launching"
    if "failed" in part_statuses:
        return "failed"
    if "running" in part_statuses or "launching" in part_statuses:
        return "running"
    if all(status == "done" for status in part_statuses):
        return "done"
    return "stopped"


@dataclass(frozen=True)
class JobSnapshot:
    """A manifest joined with its parts' live status: what XCom and logs show."""

    manifest: JobManifest
    parts: tuple[PartRecord, ...]

    @property
    def status(self) -> str:
        """The job's status word (see the module docstring)."""
        return overall_status([part.status for part in self.parts])

    @property
    def job_name(self) -> str:
        """The job's name, shared by all its parts."""
        return self.manifest.job_name

    @property
    def nodes(self) -> int:
        """The job's size in nodes."""
        return self.manifest.nodes

    def to_dict(self) -> dict[str, Any]:
        """The job's identity and state as plain JSON (the launch task's XCom)."""
        return {
            "job_name": self.job_name,
            "status": self.status,
            "launch_id": self.manifest.launch_id,
            "launched_at": self.manifest.launched_at,
            "launch_state": self.manifest.state,
            "down_reason": self.manifest.down_reason,
            "nodes": self.nodes,
            "world_size": self.manifest.world_size,
            "rendezvous": self.manifest.rendezvous,
            "engines": sorted({part.engine_target for part in self.parts}),
            "parts": [part.to_dict() for part in self.parts],
            "placement": self.manifest.placement.to_dict(),
        }
