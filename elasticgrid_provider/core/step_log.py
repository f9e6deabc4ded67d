"""Reading a job's step log incrementally, safe against truncation and rotation.

A scale check keeps a :class:`LogCursor` instead of re-reading the whole log: the byte
offset past the last complete line consumed, the file's identity (inode and a fingerprint
of its first line) and the highest step taken. The rules: docs/sensor.md ("Records"),
docs/step-samples.md.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.records import Extras, ForwardCompatible, extras_field
from elasticgrid_provider.core.samples import StepSample
from elasticgrid_provider.core.validation import AnyText, Count, JsonModel, model

REPORT_LIMIT = 200  # reports of a bad line are cut to about this many characters
HEAD_BYTES = 4096  # bytes the first line's fingerprint covers at most (a huge line stays cheap)
ROTATED_SUFFIXES = (".1",)  # a rotated log's names: steps.jsonl.1 (logrotate's and Python's)
_FIRST_BLOCK = 16 * 1024
_LARGEST_BLOCK = 4 * 1024 * 1024


def cut_report(text: str, limit: int = REPORT_LIMIT) -> str:
    """``text`` cut to about ``limit`` characters, saying how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters in all)"


@model
class LogCursor(ForwardCompatible, JsonModel):
    """Where the previous read stopped in one step log, and which file that was.

    ``offset``: bytes consumed; ``inode`` and ``head`` (a fingerprint of the
    first line): the file's identity, None until known; ``last_step``: the
    highest step taken from this log so far.
    """

    WHERE = "cursor"

    offset: Count = 0
    inode: Count | None = None
    head: AnyText | None = None
    last_step: Count | None = None
    extras: Extras = extras_field()


@dataclass(frozen=True)
class SkippedLine:
    """A step-log line that was not a valid sample, and why (cut to about 200 characters)."""

    source: str
    offset: int
    reason: str

    def __str__(self) -> str:
        return f"{self.source} at byte {self.offset}: {self.reason}"


@dataclass(frozen=True)
class StepLogChunk:
    """What one read found: samples (oldest first), the new cursor, skipped lines, and
    ``notes`` for the task log (a truncation, a rotation, steps that may be lost)."""

    source: str
    samples: tuple[StepSample, ...]
    cursor: LogCursor
    skipped: tuple[SkippedLine, ...]
    lines_read: int
    notes: tuple[str, ...] = ()
    bytes_read: int = 0


def parse_sample_line(line: bytes | str) -> StepSample:
    """Parse one step-log line into a sample, or raise ElasticGridError saying why (cut short)."""
    try:
        return StepSample.model_validate(json.loads(line))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ElasticGridError(cut_report(f"line is not valid JSON ({exc})")) from None
    except ElasticGridError as exc:
        raise ElasticGridError(cut_report(str(exc))) from None


def _split_lines(data: bytes) -> list[bytes]:
    """``data`` cut after each newline; a last piece without one is kept as it is."""
    pieces = data.split(b"\n")
    lines = [piece + b"\n" for piece in pieces[:-1]]
    if pieces[-1]:
        lines.append(pieces[-1])
    return lines


def _line_end(offset: int, line: bytes) -> int:
    """Where the complete lines end, given the newest line (unfinished without its newline)."""
    return offset + len(line) if line.endswith(b"\n") else offset


@dataclass
class _Reader:
    """Reads one step log: collects samples, skipped lines, notes and counters."""

    source: str
    after_step: int | None = None
    samples: list[StepSample] = field(default_factory=list)
    skipped: list[SkippedLine] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    lines_read: int = 0
    bytes_read: int = 0
    already_taken: int = 0

    @property
    def path(self) -> Path:
        return Path(self.source)

    def take(self, offset: int, line: bytes) -> StepSample | None:
        """Parse one complete line; a sample at or below ``after_step`` is counted, not kept."""
        self.lines_read += 1
        if not line.strip():
            return None
        try:
            sample = parse_sample_line(line)
        except ElasticGridError as exc:
            self.skipped.append(SkippedLine(self.source, offset, str(exc)))
            return None
        if self.after_step is not None and sample.step <= self.after_step:
            self.already_taken += 1
            return None
        return sample

    def last_step(self, previous: int | None) -> int | None:
        steps = [sample.step for sample in self.samples] + ([] if previous is None else [previous])
        return max(steps, default=None)

    def identity(self, handle: IO[bytes]) -> tuple[int, str | None]:
        """The open file's inode and its first line's fingerprint (None while incomplete)."""
        inode = os.fstat(handle.fileno()).st_ino
        handle.seek(0)
        head = handle.read(HEAD_BYTES)
        newline = head.find(b"\n")
        if newline >= 0:
            head = head[: newline + 1]
        self.bytes_read += len(head)
        if newline < 0 and len(head) < HEAD_BYTES:
            return inode, None  # the first line is still being written
        return inode, hashlib.sha256(head).hexdigest()[:32]

    def read_forward(self, handle: IO[bytes], start: int, size: int) -> int:
        """Read the complete lines in ``[start, size)``; returns the offset after the last one."""
        handle.seek(start)
        data = handle.read(max(0, size - start))
        self.bytes_read += len(data)
        end = data.rfind(b"\n") + 1
        offset = start
        for line in _split_lines(data[:end]):
            sample = self.take(offset, line)
            if sample is not None:
                self.samples.append(sample)
            offset += len(line)
        return start + end

    def lines_backwards(self, handle: IO[bytes], end: int) -> Iterator[tuple[int, bytes]]:
        """The lines before byte ``end``, newest first, read from disk in growing blocks."""
        position = end
        pending = b""  # the bytes between ``position`` and the newest line not yet yielded
        block = _FIRST_BLOCK
        while position > 0:
            start = max(0, position - block)
            handle.seek(start)
            data = handle.read(position - start)
            self.bytes_read += len(data)
            pending = data + pending
            position = start
            block = min(block * 2, _LARGEST_BLOCK)
            # every line but the first in ``pending`` is whole; the first is whole only at byte 0
            lines = _split_lines(pending)
            keep = 0 if position == 0 else 1
            offset = position + len(pending)
            for line in reversed(lines[keep:]):
                offset -= len(line)
                yield offset, line
            pending = b"".join(lines[:keep])

    def read_tail(self, handle: IO[bytes], size: int, wanted: int, nodes: int | None) -> int:
        """Take the newest ``wanted`` samples (at ``nodes`` nodes); returns the end of the lines."""
        end: int | None = None
        newest_first: list[StepSample] = []
        first_skipped = len(self.skipped)
        for offset, line in self.lines_backwards(handle, size):
            if end is None:
                end = _line_end(offset, line)
            if not line.endswith(b"\n"):
                continue  # the line being written: left for the next check
            sample = self.take(offset, line)
            if sample is None:
                continue
            if nodes is not None and sample.nodes != nodes:
                break  # measured at an earlier size: nothing before it can enter the window
            newest_first.append(sample)
            if len(newest_first) >= wanted:
                break
        self.samples.extend(reversed(newest_first))
        self.skipped[first_skipped:] = reversed(self.skipped[first_skipped:])
        return end or 0

    def rotated_rest(self, cursor: LogCursor) -> bool:
        """Read the rest of the previous file when it still exists under a rotated name."""
        for suffix in ROTATED_SUFFIXES:
            candidate = self.path.with_name(self.path.name + suffix)
            try:
                with open(candidate, "rb") as handle:
                    if self.identity(handle) != (cursor.inode, cursor.head):
                        continue
                    before = len(self.samples)
                    self.read_forward(handle, cursor.offset, handle.seek(0, os.SEEK_END))
                    self.notes.append(
                        f"Step log {self.path} was rotated; read the rest of the previous file "
                        f"at {candidate} ({len(self.samples) - before} sample(s) after byte "
                        f"{cursor.offset}), then the new file from its start."
                    )
                    return True
            except FileNotFoundError:
                continue
        return False

    def note_lost(self, previous: LogCursor, what: str) -> None:
        names = " or ".join(str(self.path.with_name(self.path.name + s)) for s in ROTATED_SUFFIXES)
        after = "" if previous.last_step is None else f" after step {previous.last_step}"
        self.notes.append(
            f"Step log {self.path} {what} and the previous file is not at {names}: any steps it "
            f"received{after} (past byte {previous.offset}) since the last check are lost; "
            "reading the log from its start, without the steps already taken."
        )

    def read_open(
        self, handle: IO[bytes], previous: LogCursor | None, tail: int | None, nodes: int | None
    ) -> LogCursor:
        """:func:`read_step_log` on the open file; returns the new cursor."""
        inode, head = self.identity(handle)
        size = handle.seek(0, os.SEEK_END)
        if previous is None:
            if tail is None:
                end = self.read_forward(handle, 0, size)
            else:
                end = self.read_tail(handle, size, tail, nodes)
            return LogCursor(end, inode, head, self.last_step(None))
        same_file = previous.inode is None or (  # a bare offset from an older state: trusted
            previous.inode == inode and previous.head in (None, head)
        )
        if same_file and size >= previous.offset:
            end = self.read_forward(handle, previous.offset, size)
            return LogCursor(end, inode, head, self.last_step(previous.last_step))
        if same_file and previous.inode is not None:
            self.notes.append(
                f"Step log {self.path} was truncated to {size} bytes (it had {previous.offset} "
                "when last read); its remaining lines were read before, so reading continues at "
                "its new end."
            )
            end = next((_line_end(*line) for line in self.lines_backwards(handle, size)), 0)
            return LogCursor(end, inode, head, previous.last_step)
        if previous.inode is None:  # a bare offset, now past the end
            self.notes.append(
                f"Step log {self.path} is shorter than the {previous.offset} bytes read before; "
                "reading it again from its start, without the steps already taken."
            )
        elif not self.rotated_rest(previous):
            self.note_lost(previous, "was emptied" if head is None else "was replaced or rewritten")
        self.after_step = self.last_step(previous.last_step)
        end = self.read_forward(handle, 0, size)
        if self.already_taken:
            self.notes.append(
                f"Left out {self.already_taken} line(s) of {self.path} whose step was already "
                f"taken (up to step {self.after_step})."
            )
        return LogCursor(end, inode, head, self.last_step(self.after_step))


def read_step_log(
    path: str | Path,
    cursor: LogCursor | int | None = None,
    *,
    tail: int | None = None,
    nodes: int | None = None,
) -> StepLogChunk:
    """Read what is new in the step log at ``path`` since ``cursor`` (docs/sensor.md).

    Without a cursor, ``tail`` reads only the newest ``tail`` samples, from the end (stopping
    early at one measured at another size than ``nodes``, if given). A missing file reads as
    empty; a later first read of it starts at its beginning.
    """
    previous = LogCursor(offset=cursor) if isinstance(cursor, int) else cursor
    reader = _Reader(str(path))
    try:
        with open(path, "rb") as handle:
            new_cursor = reader.read_open(handle, previous, tail, nodes)
    except FileNotFoundError:
        new_cursor = previous or LogCursor()
        if previous is not None and previous.inode is not None:
            if not reader.rotated_rest(previous):
                reader.note_lost(previous, "was removed")
            new_cursor = LogCursor(last_step=reader.last_step(previous.last_step))
    return StepLogChunk(
        source=reader.source,
        samples=tuple(reader.samples),
        cursor=new_cursor,
        skipped=tuple(reader.skipped),
        lines_read=reader.lines_read,
        notes=tuple(reader.notes),
        bytes_read=reader.bytes_read,
    )
