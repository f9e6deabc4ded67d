"""Reading a job's step log incrementally.

A training job's reporter appends one JSON object per step, one per line, to
a step log. A scale check must not re-read the whole log every few minutes,
so it keeps a *cursor*: the byte offset just past the last complete line it
consumed. Rules:

* only complete lines count: a trailing line without its newline is being
  written right now and is left for the next check (the cursor stops before it);
* a line that is not JSON, or not a valid sample, is skipped and reported,
  never fatal, and the cursor moves past it so it is reported once;
* a log shorter than the cursor was replaced or truncated: reading restarts
  at the beginning and the result says so;
* the reporter's ``time`` field (when the line was written, i.e. when the
  step ended) is kept in the sample: the scheduler reads arrival rates from it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.samples import StepSample

REPORTER_ONLY_FIELDS: frozenset[str] = frozenset()
"""Reporter fields that are not part of a sample (none since ``time`` became one)."""


@dataclass(frozen=True)
class SkippedLine:
    """A step-log line that was not a valid sample, and why."""

    source: str
    offset: int
    reason: str

    def __str__(self) -> str:
        return f"{self.source} at byte {self.offset}: {self.reason}"


@dataclass(frozen=True)
class StepLogChunk:
    """What one incremental read found: samples, the new cursor, skipped lines."""

    source: str
    samples: tuple[StepSample, ...]
    cursor: int
    skipped: tuple[SkippedLine, ...]
    lines_read: int
    restarted: bool = False


def sample_fields(entry: Any) -> Any:
    """A reporter's entry without the fields that are not part of a sample."""
    if isinstance(entry, dict):
        return {key: value for key, value in entry.items() if key not in REPORTER_ONLY_FIELDS}
    return entry


def parse_sample_line(line: bytes | str) -> StepSample:
    """Parse one step-log line into a sample, or raise ElasticGridError saying why."""
    try:
        data = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ElasticGridError(f"line is not valid JSON ({exc})") from None
    return StepSample.from_dict(sample_fields(data))


def read_step_log(path: str | Path, cursor: int = 0) -> StepLogChunk:
    """Read the complete lines of ``path`` after byte ``cursor``; a missing file reads as empty."""
    source = str(path)
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            restarted = size < cursor
            start = 0 if restarted else cursor
            handle.seek(start)
            data = handle.read(size - start)
    except FileNotFoundError:
        return StepLogChunk(source, (), cursor, (), 0)
    end = data.rfind(b"\n") + 1  # only complete lines
    samples: list[StepSample] = []
    skipped: list[SkippedLine] = []
    offset = start
    lines_read = 0
    for line in data[:end].splitlines(keepends=True):
        lines_read += 1
        if line.strip():
            try:
                samples.append(parse_sample_line(line))
            except ElasticGridError as exc:
                skipped.append(SkippedLine(source, offset, str(exc)))
        offset += len(line)
    return StepLogChunk(source, tuple(samples), start + end, tuple(skipped), lines_read, restarted)
