"""Reading step logs: real files, truncated, rotated, rewritten and huge, as a check sees them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.state import ScaleState
from elasticgrid_provider.core.step_log import (
    REPORT_LIMIT,
    LogCursor,
    parse_sample_line,
    read_step_log,
)


def line(step: int, nodes: int = 2, **extra: object) -> str:
    return json.dumps({"step": step, "duration_s": 1.0, "queue_s": 0.5, "nodes": nodes, **extra})


def write(path: Path, steps: range | list[int], nodes: int = 2, mode: str = "a") -> None:
    with path.open(mode) as handle:
        handle.write("".join(line(step, nodes, time=1000.0 + step) + "\n" for step in steps))


def steps_of(chunk) -> list[int]:
    return [sample.step for sample in chunk.samples]


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "steps.jsonl"


def test_each_read_takes_only_the_new_complete_lines(log: Path) -> None:
    write(log, range(3))
    first = read_step_log(log, LogCursor())
    assert steps_of(first) == [0, 1, 2]
    assert first.cursor.offset == log.stat().st_size
    assert first.cursor.inode == log.stat().st_ino and first.cursor.head is not None
    assert first.cursor.last_step == 2
    write(log, range(3, 5))
    with log.open("a") as handle:
        handle.write('{"step": 5, "dur')
    second = read_step_log(log, first.cursor)
    assert steps_of(second) == [3, 4]
    assert second.cursor.offset == log.stat().st_size - len('{"step": 5, "dur')
    assert second.notes == ()


def test_a_log_truncated_to_its_first_lines_counts_no_step_twice(log: Path) -> None:
    write(log, range(6))
    read = read_step_log(log, LogCursor())
    assert steps_of(read) == list(range(6))
    keep = b"".join(log.read_bytes().splitlines(keepends=True)[:2])
    with log.open("r+b") as handle:  # truncated in place: same file, same first line
        handle.truncate(len(keep))
    after = read_step_log(log, read.cursor)
    assert steps_of(after) == []
    assert after.cursor.offset == len(keep)
    assert any("was truncated to" in note for note in after.notes)
    write(log, range(6, 8))  # the writer carries on after the cut
    assert steps_of(read_step_log(log, after.cursor)) == [6, 7]


def test_a_rotated_log_loses_no_step_when_the_old_file_is_at_steps_jsonl_1(log: Path) -> None:
    write(log, range(3))
    read = read_step_log(log, LogCursor())
    write(log, range(3, 5))  # written after the check, before the rotation
    log.rename(log.with_name("steps.jsonl.1"))
    write(log, range(5, 7))  # the new file
    after = read_step_log(log, read.cursor)
    assert steps_of(after) == [3, 4, 5, 6]
    assert any("was rotated; read the rest of the previous file" in n for n in after.notes)
    assert after.cursor.inode == log.stat().st_ino
    write(log, range(7, 8))
    assert steps_of(read_step_log(log, after.cursor)) == [7]


def test_a_rotated_log_whose_old_file_is_gone_says_what_was_lost(log: Path) -> None:
    write(log, range(3))
    read = read_step_log(log, LogCursor())
    write(log, range(3, 5))
    log.unlink()  # moved somewhere unknown
    write(log, range(5, 7))
    after = read_step_log(log, read.cursor)
    assert steps_of(after) == [5, 6]
    [note] = after.notes
    assert "was replaced or rewritten" in note
    assert "after step 2" in note and "are lost" in note


def test_a_replaced_log_holding_old_lines_again_counts_no_step_twice(log: Path) -> None:
    write(log, range(4))
    read = read_step_log(log, LogCursor())
    log.unlink()
    write(log, range(2, 6))  # the last old lines copied over, then new ones
    after = read_step_log(log, read.cursor)
    assert steps_of(after) == [4, 5]
    assert any("Left out 2 line(s)" in note and "up to step 3" in note for note in after.notes)


def test_a_copy_of_the_same_file_under_a_reused_inode_reads_on(log: Path) -> None:
    write(log, range(4))
    read = read_step_log(log, LogCursor())
    content = log.read_bytes()
    log.unlink()
    log.write_bytes(content)  # same first line; the inode may or may not be reused
    write(log, range(4, 6))
    assert steps_of(read_step_log(log, read.cursor)) == [4, 5]


def test_a_rewritten_log_is_read_from_its_start(log: Path) -> None:
    write(log, range(10, 13))
    read = read_step_log(log, LogCursor())
    with log.open("w") as handle:  # same inode, other content
        handle.write(line(13, time=5.0) + "\n" + line(14) + "\n")
    after = read_step_log(log, read.cursor)
    assert steps_of(after) == [13, 14]
    [note] = after.notes
    assert "was replaced or rewritten" in note and "after step 12" in note


def test_a_log_removed_and_not_yet_started_again(log: Path) -> None:
    write(log, range(3))
    read = read_step_log(log, LogCursor())
    log.rename(log.with_name("steps.jsonl.1"))
    write(log.with_name("steps.jsonl.1"), range(3, 4))
    gone = read_step_log(log, read.cursor)
    assert steps_of(gone) == [3]  # the rest of the rotated file
    assert gone.cursor == LogCursor(last_step=3)
    write(log, range(4, 6), mode="w")
    assert steps_of(read_step_log(log, gone.cursor)) == [4, 5]


def test_an_offset_from_an_older_state_is_honoured(log: Path) -> None:
    write(log, range(4))
    two_lines = len(line(0, time=1000.0)) + len(line(1, time=1001.0)) + 2
    chunk = read_step_log(log, two_lines)
    assert steps_of(chunk) == [2, 3]
    assert chunk.cursor.inode == log.stat().st_ino  # gains an identity


def test_a_missing_log_reads_as_empty_and_is_later_read_from_its_start(log: Path) -> None:
    empty = read_step_log(log, None, tail=2)
    assert steps_of(empty) == [] and empty.cursor == LogCursor()
    write(log, range(5))
    assert steps_of(read_step_log(log, empty.cursor, tail=2)) == [0, 1, 2, 3, 4]


def test_the_first_read_takes_only_the_tail_the_window_needs(log: Path) -> None:
    write(log, range(1000))
    with log.open("a") as handle:
        handle.write('{"step": 1000, "dur')  # being written
    chunk = read_step_log(log, None, tail=10)
    assert steps_of(chunk) == list(range(990, 1000))
    assert chunk.cursor.offset == log.stat().st_size - len('{"step": 1000, "dur')
    assert chunk.cursor.last_step == 999
    assert chunk.bytes_read < log.stat().st_size / 2
    with log.open("a") as handle:
        handle.write('ation_s": 1.0, "nodes": 2}\n')
    assert steps_of(read_step_log(log, chunk.cursor)) == [1000]


def test_the_tail_stops_at_a_sample_of_another_size(log: Path) -> None:
    write(log, range(5), nodes=2)
    write(log, range(5, 8), nodes=4)
    chunk = read_step_log(log, None, tail=10, nodes=4)
    assert steps_of(chunk) == [5, 6, 7]
    assert chunk.cursor.offset == log.stat().st_size


def test_the_tail_reports_bad_lines_in_file_order(log: Path) -> None:
    write(log, range(3))
    with log.open("a") as handle:
        handle.write("not json\n" + line(3) + "\n" + '{"step": -1, "duration_s": 1}\n')
    chunk = read_step_log(log, None, tail=3)
    assert steps_of(chunk) == [1, 2, 3]
    assert [skipped.reason[:20] for skipped in chunk.skipped] == [
        "line is not valid JS",
        "sample step must be ",
    ]
    assert chunk.skipped[0].offset < chunk.skipped[1].offset


def test_a_huge_bad_value_is_reported_cut_short(log: Path) -> None:
    huge = "x" * 10_000_000
    with log.open("w") as handle:
        handle.write(json.dumps({"step": 1, "duration_s": huge}) + "\n" + line(2) + "\n")
    chunk = read_step_log(log, LogCursor())
    assert steps_of(chunk) == [2]
    [skipped] = chunk.skipped
    assert len(skipped.reason) < REPORT_LIMIT + 50
    assert skipped.reason.startswith("sample duration_s must be a number, got 'xxx")
    assert skipped.reason.endswith("(10000042 characters in all)")
    tail = read_step_log(log, None, tail=5)
    assert steps_of(tail) == [2] and len(tail.skipped[0].reason) < REPORT_LIMIT + 50


def test_parse_errors_are_one_short_sentence() -> None:
    with pytest.raises(ElasticGridError) as caught:
        parse_sample_line(json.dumps({"step": 1, "duration_s": 1, "x" * 5000: 1}))
    assert len(str(caught.value)) < REPORT_LIMIT + 50
    assert str(caught.value).startswith("sample has an unknown field 'xxx")


def test_cursor_round_trip_and_bad_stored_cursors() -> None:
    """Cursors as a scale state stores them: an object, or a bare byte offset (older states)."""
    cursor = LogCursor(120, 77, "ab" * 16, 9)
    stored = json.loads(json.dumps(cursor.model_dump()))
    assert ScaleState("j", cursors={"c": stored}).log_cursor("c") == cursor
    assert ScaleState("j", cursors={"c": 42}).log_cursor("c") == LogCursor(42)
    where = "scale state cursor 'c'"
    for value, message in [
        ("12", f"{where} must be a number, got '12'"),
        ({"offset": -1}, f"{where} offset must be at least 0, got -1"),
        ({"offset": 1, "head": 5}, f"{where} head must be a string, got 5"),
    ]:
        with pytest.raises(ElasticGridError) as caught:
            ScaleState("j", cursors={"c": value})
        assert str(caught.value) == message


def test_a_first_line_still_being_written_has_no_identity_yet(log: Path) -> None:
    log.write_text('{"step": 0, "dur')
    chunk = read_step_log(log, LogCursor())
    assert chunk.cursor == LogCursor(0, log.stat().st_ino, None, None)
    with log.open("a") as handle:
        handle.write('ation_s": 1.0}\n')
    after = read_step_log(log, chunk.cursor)
    assert steps_of(after) == [0] and after.cursor.head is not None
    assert os.path.getsize(log) == after.cursor.offset
