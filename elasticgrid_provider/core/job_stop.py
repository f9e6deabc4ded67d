"""What a user's stop of a job did: the parts it stopped, their ranks and engine, or why
there was nothing left to stop.

:func:`~elasticgrid_provider.hooks.launch_stop.stop_job` builds a :class:`JobStopReport`;
``elasticgrid stop`` prints it (:meth:`JobStopReport.text`, or ``model_dump()`` with
``--json``) and ``StopJobOperator`` logs it and returns ``model_dump()`` as its XCom:
small plain JSON, whatever the engine (local, ssh, ec2, ``module=...``).

Pure: no Airflow, no iroh-tinker, no I/O.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

from elasticgrid_provider.core.formatting import aligned_table, rank_range
from elasticgrid_provider.core.job import JobManifest, JobStatus, PartRecord
from elasticgrid_provider.core.launch_record import LaunchPhase
from elasticgrid_provider.core.validation import (
    AnyText,
    Count,
    JsonModel,
    Positive,
    Text,
    choice,
    model,
)


@model
class StoppedPart(JsonModel):
    """One part a stop ended: its provider, engine, nodes and global ranks (``0-1``)."""

    name: Text
    provider: Text
    engine: Text
    nodes: Positive
    ranks: Text

    @classmethod
    def of(cls, manifest: JobManifest, part: PartRecord) -> StoppedPart:
        """The part as its launch record describes it (its engine from the placement)."""
        engines = {s.provider.name: s.provider.engine_name for s in manifest.placement.assignments}
        ranks = rank_range(part.rank_offset, part.nodes * manifest.procs_per_node)
        engine = engines.get(part.provider, part.engine_target)
        return cls(part.name, part.provider, engine, part.nodes, ranks)


@model
class JobStopReport(JsonModel):
    """What a stop did to ``job_name``: ``parts`` stopped and ``other_processes`` (of the job,
    not recorded by iroh-tinker: a launch cut short) ended, ``released_nodes`` given back to
    the grid ledger; or ``nothing_left``, why there was nothing to stop (a second stop)."""

    job_name: Text
    launch_id: Text
    launch_state: Annotated[LaunchPhase, choice(LaunchPhase)]
    job_status: Annotated[JobStatus, choice(JobStatus)]
    parts: tuple[StoppedPart, ...] = ()
    other_processes: Count = 0
    released_nodes: dict[str, int] = dataclasses.field(default_factory=dict, hash=False)
    nothing_left: AnyText | None = None

    @property
    def stopped(self) -> bool:
        """Whether this stop ended anything."""
        return bool(self.parts or self.other_processes)

    def summary(self) -> str:
        """One sentence: what was stopped, or why nothing was left to stop."""
        released = self.released_text()
        if not self.stopped:
            return (
                f"Job {self.job_name!r} has nothing left to stop: {self.nothing_left}"
                + (f"; {released}" if released else "")
                + "."
            )
        nodes = sum(part.nodes for part in self.parts)
        what = [f"{len(self.parts)} part(s), {nodes} node(s)"] if self.parts else []
        if self.other_processes:
            what.append(f"{self.other_processes} process(es) iroh-tinker had not recorded")
        return (
            f"Stopped job {self.job_name!r} (launch {self.launch_id}, recorded "
            f"{self.launch_state}): {' and '.join(what)}"
            + (f"; {released}" if released else "")
            + "."
        )

    def released_text(self) -> str:
        """``released 3 node(s) on the grid (onprem 2, cloud 1)``, or "" when none were held."""
        if not self.released_nodes:
            return ""
        total = sum(self.released_nodes.values())
        shares = ", ".join(f"{name} {nodes}" for name, nodes in self.released_nodes.items())
        return f"released {total} node(s) on the grid ({shares})"

    def text(self) -> str:
        """The summary, then one row per stopped part: provider, engine, nodes, global ranks."""
        if not self.parts:
            return self.summary()
        rows = [("part", "provider", "engine", "nodes", "ranks")]
        rows += [(p.name, p.provider, p.engine, str(p.nodes), p.ranks) for p in self.parts]
        return self.summary() + "\n\n" + aligned_table(rows, right=(3,))
