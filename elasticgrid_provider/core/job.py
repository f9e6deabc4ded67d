"""What a launched job is, and how its state is summarised.

A job is launched as one iroh-tinker job *part* per provider share
(:mod:`elasticgrid_provider.core.launch_spec`). Its :class:`JobManifest` (a record:
:data:`MANIFEST_LAYOUT`, written next to the parts before any part starts) records the launch's
phase (:class:`~elasticgrid_provider.core.launch_record.LaunchPhase`) and salted fingerprints
of what it runs, so a retry knows the parts are its own and never starts a second copy. A
:class:`JobSnapshot` joins the manifest with each part's live status into one
:class:`JobStatus` word, whose :attr:`JobStatus.is_terminal` is the one definition of "ended"
(docs/operators.md, "LaunchOperator"). Plain data that round-trips through JSON (XCom, logs).
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from pydantic import model_serializer

from elasticgrid_provider.core.launch_record import LaunchPhase
from elasticgrid_provider.core.placement import Placement
from elasticgrid_provider.core.records import Extras, ForwardCompatible, RecordLayout, extras_field
from elasticgrid_provider.core.validation import (
    AnyText,
    Choice,
    Count,
    JsonModel,
    Positive,
    Text,
    choice,
    model,
    none_as_default,
)

MANIFEST_LAYOUT = RecordLayout("job manifest", major=1, unversioned=1)
"""The layout of ``manifest.json`` this release writes and reads."""


class JobStatus(Choice):
    """A job's (or one part's) status word: ``failed`` when any part failed; ``running`` when
    any part still runs (and none failed); ``done`` when every part finished; ``stopped`` when
    the parts were stopped (a resize, ``on_kill``, a user); ``launching`` while the manifest
    exists but no part has reported yet."""

    LAUNCHING = "launching"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def is_terminal(self) -> bool:
        """Whether the job has ended: nothing more will change without a new launch."""
        return self in (JobStatus.DONE, JobStatus.FAILED, JobStatus.STOPPED)

    @classmethod
    def of_part(cls, word: str) -> JobStatus:
        """A part's status from iroh-tinker's word for it: ``running``, ``done``, ``failed`` or
        ``stopped``; any other word (``dry-run``, one it added later) reads as ``failed``."""
        status = next((member for member in cls if member.value == word), cls.FAILED)
        return cls.FAILED if status is cls.LAUNCHING else status


@model
class PartRecord(ForwardCompatible, JsonModel):
    """One iroh-tinker job that runs one provider's share of the nodes."""

    WHERE = "job part"

    name: Text
    provider: Text
    engine_target: Text
    nodes: Positive
    rank_offset: Count
    spec_path: AnyText
    status: Annotated[JobStatus, choice(JobStatus)] = JobStatus.LAUNCHING
    job_dir: AnyText = ""
    last_error: AnyText | None = None
    extras: Extras = extras_field()


@model
class JobManifest(ForwardCompatible, JsonModel):
    """Which parts make up a job, at which placement, from which launch. One written before the
    launch phase and fingerprints existed reads as a confirmed launch without fingerprints (the
    next launch relaunches rather than attaches); a newer major is refused in one sentence and
    left as it is; a newer minor's fields are kept when it is rewritten."""

    LAYOUT = MANIFEST_LAYOUT

    job_name: Text
    launch_id: Text
    launched_at: Text
    placement: Placement
    world_size: Positive
    procs_per_node: Positive
    rendezvous: AnyText
    run: AnyText
    parts: tuple[PartRecord, ...] = ()
    state: Annotated[LaunchPhase, choice(LaunchPhase)] = LaunchPhase.RUNNING
    down_reason: AnyText | None = None
    fingerprint_salt: AnyText = ""
    fingerprints: dict[str, str] = dataclasses.field(default_factory=dict, hash=False)
    extras: Extras = extras_field()

    @classmethod
    def _migrate(cls, data: dict[str, Any], major: int) -> dict[str, Any]:
        """An older manifest's null ``fingerprints`` take the default."""
        return none_as_default(data, "fingerprints")

    @property
    def nodes(self) -> int:
        """The job's size in nodes (what the scheduler calls the current size)."""
        return self.placement.total_nodes


def overall_status(part_statuses: list[str]) -> JobStatus:
    """Fold the parts' status words into the job's (:class:`JobStatus`)."""
    if not part_statuses:
        return JobStatus.LAUNCHING
    if JobStatus.FAILED in part_statuses:
        return JobStatus.FAILED
    if JobStatus.RUNNING in part_statuses or JobStatus.LAUNCHING in part_statuses:
        return JobStatus.RUNNING
    if all(status == JobStatus.DONE for status in part_statuses):
        return JobStatus.DONE
    return JobStatus.STOPPED


@model
class JobSnapshot(JsonModel):
    """A manifest joined with its parts' live status: what XCom and logs show."""

    manifest: JobManifest
    parts: tuple[PartRecord, ...]

    @property
    def status(self) -> JobStatus:
        """The job's status word (:class:`JobStatus`)."""
        return overall_status([part.status for part in self.parts])

    @property
    def job_name(self) -> str:
        """The job's name, shared by all its parts."""
        return self.manifest.job_name

    @property
    def nodes(self) -> int:
        """The job's size in nodes."""
        return self.manifest.nodes

    @model_serializer(mode="plain")
    def _as_json(self) -> dict[str, Any]:
        """The job's identity and state as plain JSON (the launch task's XCom)."""
        return {
            "job_name": self.job_name,
            "status": self.status.value,
            "launch_id": self.manifest.launch_id,
            "launched_at": self.manifest.launched_at,
            "launch_state": self.manifest.state,
            "down_reason": self.manifest.down_reason,
            "nodes": self.nodes,
            "world_size": self.manifest.world_size,
            "rendezvous": self.manifest.rendezvous,
            "engines": sorted({part.engine_target for part in self.parts}),
            "parts": [part.model_dump() for part in self.parts],
            "placement": self.manifest.placement.model_dump(),
        }
