"""What the sharing of one grid among many jobs is decided from and ends in.

One :class:`JobClaim` per job, the :class:`ShortfallMode` of a request that does not fit,
and the results; who gets what is decided in one place,
:mod:`elasticgrid_provider.core.fleet.allocator`. The rules: docs/fleet.md ("When a
request does not fit: the shortfall mode", "The allocator").
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import Annotated

from pydantic import model_validator

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.validation import (
    AnyText,
    Choice,
    Count,
    Flag,
    JsonModel,
    NonNegative,
    Text,
    check_integer,
    check_number,
    choice,
    model,
    whole,
)

Priority = Annotated[int, whole(None)]  # any whole number; higher goes first


class ShortfallMode(Choice):
    """What a launch or scale-up that does not fit the free capacity does (docs/fleet.md)."""

    WAIT = "wait"
    TAKE_WHAT_FITS = "take_what_fits"
    FAIL = "fail"


DEFAULT_SHORTFALL_MODE = ShortfallMode.WAIT


class Verdict(Choice):
    """How a request against free capacity ends: granted, waiting in the queue, or failed."""

    GRANTED = "granted"
    WAITING = "waiting"
    FAILED = "failed"


@model
class JobClaim(JsonModel):
    """One job's claim on the grid: what it holds, what it wants, and what a node is worth to it."""

    job: Text
    nodes: Count
    wanted: Count
    min_nodes: Count = 1
    priority: Priority = 0
    elastic: Flag = True
    gain_per_node: NonNegative = 1.0
    remaining_s: NonNegative = 0.0
    restart_s: NonNegative = 0.0
    ends_in_s: NonNegative | None = None
    """Seconds until it finishes at the size it holds, when its work left is known (None: not
    known, as a stream's): when its nodes come free for a launch that waits."""
    deadline_nodes: Count = 0
    """The size it needs to meet its deadline (0: no deadline, met at any size, or no size
    meets it any more). A stream counts the size its demand needs as its deadline."""
    slack_s: float | None = None
    """Seconds to spare at its deadline at ``deadline_nodes`` (None: unknown, counted as 0;
    below 0: no size meets it, the job is hopeless)."""
    since: float = 0.0
    """When it started waiting (its queue entry's arrival): the last tie-break of the order."""
    accepts: Count = 0
    """The smallest size a queued launch accepts (0: its ``min_nodes``); a waiting launch
    accepts only its wanted size."""

    @model_validator(mode="after")
    def _wanted_reaches_min(self) -> JobClaim:
        if self.wanted and self.wanted < self.min_nodes:
            raise ElasticGridError(
                f"job claim {self.job!r} wanted {self.wanted} is below its min_nodes "
                f"{self.min_nodes}"
            )
        return self

    @property
    def extra_wanted(self) -> int:
        """Nodes it wants on top of those it holds."""
        return max(0, self.wanted - self.nodes)

    @property
    def extra_needed(self) -> int:
        """Nodes it must get on top of those it holds to run at all (up to ``min_nodes``)."""
        return max(0, self.min_nodes - self.nodes) if self.wanted else 0

    def net_gain(self, step: int, start: int | None = None) -> float:
        """Useful node-seconds ``step`` more nodes add, minus the restart at the larger size
        (a first launch, from 0 nodes, pays no restart)."""
        held = self.nodes if start is None else start
        restart = self.restart_s * (held + step) if self.nodes else 0.0
        return step * self.gain_per_node * self.remaining_s - restart


@model
class ShortfallDecision(JsonModel):
    """What one request gets: nodes granted, a place in the queue, or why it failed."""

    verdict: Annotated[Verdict, choice(Verdict)]
    nodes: Count = 0
    queue_position: Count = 0
    reason: AnyText = ""


@model
class Resize(JsonModel):
    """One job's new size, decided by a sharing rule (``preempted_by`` names who shrank it)."""

    job: Text
    from_nodes: Count
    to_nodes: Count
    preempted_by: AnyText = ""


@model
class PreemptionPlan(JsonModel):
    """The shrinks that make room for a request, and the nodes it gets after them."""

    request: Text
    shrinks: tuple[Resize, ...] = ()
    nodes_freed: Count = 0
    granted: Count = 0


def free_total(free: Mapping[str, int]) -> int:
    """All free nodes of the grid; each provider's count checked (a whole number >= 0)."""
    return sum(check_integer(f"free nodes of {name!r}", count) for name, count in free.items())


def shortfall_sentence(
    request: JobClaim, room: int, holdings: Mapping[str, Mapping[str, int]]
) -> str:
    """``job 'a' wants 6 more nodes but 2 are free: 'b' holds 4 on local; ...``."""
    held = sorted(
        ((job, {p: n for p, n in by_provider.items() if n > 0}) for job, by_provider in holdings.items()
         if job != request.job),
        key=lambda item: (-sum(item[1].values()), item[0]),
    )  # fmt: skip
    holders = "; ".join(
        f"{job!r} holds " + " and ".join(f"{n} on {p}" for p, n in sorted(by_provider.items()))
        for job, by_provider in held
        if by_provider
    )
    return (
        f"job {request.job!r} wants {request.extra_wanted} more nodes but {room} "
        f"{'is' if room == 1 else 'are'} free: " + (holders or "no other job holds any")
    )


def gain_per_node(throughput: Mapping[int, float], nodes: int, to_nodes: int) -> float:
    """Marginal efficiency of growing from ``nodes`` to ``to_nodes``, from measured throughput
    by size: the throughput each added node brings over what one node brings at ``nodes``
    (1.0 for linear scaling). Sizes between measured ones are interpolated; beyond the largest,
    the last measured slope goes on (no measurement: 1.0)."""
    if nodes < 1 or to_nodes <= nodes:
        raise ElasticGridError(f"to_nodes {to_nodes} must be above nodes {nodes} (at least 1)")
    per_node = _rate_at(throughput, nodes) / nodes
    if per_node <= 0:
        return 1.0
    gained = (_rate_at(throughput, to_nodes) - _rate_at(throughput, nodes)) / (to_nodes - nodes)
    return max(0.0, gained / per_node)


def _rate_at(throughput: Mapping[int, float], size: int) -> float:
    """Throughput at ``size``: interpolated between measured sizes, proportional below the
    smallest, the last slope beyond the largest."""
    points = sorted(
        (check_integer("throughput size", n, minimum=1), check_number(f"throughput at {n}", r))
        for n, r in throughput.items()
    )
    if len(points) < 2:
        scale = points[0][1] / points[0][0] if points else 1.0
        return scale * size
    if size <= points[0][0]:
        return points[0][1] * size / points[0][0]
    index = min(bisect.bisect_left([n for n, _ in points], size), len(points) - 1)
    (low, low_rate), (high, high_rate) = points[index - 1], points[index]
    return low_rate + (high_rate - low_rate) * (size - low) / (high - low)
