"""Benchmark: the first scale check of a long-running job, full read against tail read.

Run with ``make bench-step-log`` (``--lines N``, ``--window W``; ``--quick``:
20,000 lines). It writes a step log of ``N`` lines (default 1,000,000, as the reporter writes
them) to a temporary folder and reads it twice with
:func:`~elasticgrid_provider.core.step_log.read_step_log`:

* **full read**: from the start (``cursor=LogCursor()``), as every first check
  did before; it parses every line;
* **tail read**: a first check (``cursor=None``, ``tail=W``), which reads from
  the end only as far back as the window of ``W`` samples needs.

Both must end at the same cursor offset and the tail's samples must be the
full read's newest ``W``, and the full read must parse every line (else the
baseline did not really run). It prints time (best of a few repeats) and
bytes read for each, and the tail/full ratios; the target is at most 1/100 of
a full read. Figures, not asserts: the machine's load moves the times.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.report import Report, Table, arguments, best_time, check
from elasticgrid_provider.core.step_log import LogCursor, read_step_log

REPEATS = 3


def write_log(path: Path, lines: int) -> None:
    """A reporter-style step log: one compact JSON object per step, with its ``time``."""
    with path.open("w") as handle:
        for step in range(lines):
            record = {
                "step": step,
                "duration_s": 1.5 + (step % 7) / 10,
                "queue_s": 0.25,
                "nodes": 4,
                "tokens": 8192.0,
                "time": 1_767_225_600.0 + step * 1.5,
            }
            handle.write(json.dumps(record, separators=(",", ":")) + "\n")


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--lines", type=int, help="lines in the step log (default 1,000,000)")
    parser.add_argument("--window", type=int, default=10, help="the window size (samples)")
    args = parser.parse_args()
    lines = args.lines or (20_000 if args.quick else 1_000_000)
    repeats = 1 if args.quick else REPEATS
    with tempfile.TemporaryDirectory(prefix="bench-step-log-") as folder:
        path = Path(folder) / "steps.jsonl"
        write_log(path, lines)
        size = path.stat().st_size
        full_s, full = best_time(lambda: read_step_log(path, LogCursor()), 1)
        tail_s, tail = best_time(lambda: read_step_log(path, None, tail=args.window), repeats)
    check(
        full.lines_read == lines and len(full.samples) == lines,
        f"the full read (the baseline) parsed {full.lines_read:,} of {lines:,} lines",
    )
    check(
        tail.cursor.offset == full.cursor.offset,
        "the tail read and the full read end at different offsets",
    )
    check(
        tail.samples == full.samples[-args.window :],
        "the tail read did not return the full read's newest samples",
    )
    report = Report(
        "step-log",
        "First scale check of a long-running job: tail read against full read",
        f"A job's first scale check reads only the end of its step log that a window of "
        f"{args.window} samples needs; the baseline reads the whole log from the start, as "
        f"every first check once did. Step log of {lines:,} lines ({size / 1e6:.1f} MB); both "
        "reads must end at the same offset and agree on the newest samples.",
        quick=args.quick,
        settings=f"{lines:,} lines, best of {repeats} (tail), 1 (full)",
    )
    report.tables.append(
        Table(
            ["tail read / full read", "bytes read", "lines parsed", "time"],
            [
                [
                    "ratio",
                    f"1/{full.bytes_read / tail.bytes_read:,.0f}",
                    f"1/{full.lines_read / max(tail.lines_read, 1):,.0f}",
                    f"1/{full_s / tail_s:,.0f}",
                ],
                ["full read", f"{full.bytes_read:,}", f"{full.lines_read:,}", f"{full_s:.3f} s"],
                ["tail read", f"{tail.bytes_read:,}", f"{tail.lines_read:,}", f"{tail_s:.6f} s"],
            ],
        )
    )
    verdict = (
        "within" if max(tail.bytes_read / full.bytes_read, tail_s / full_s) <= 0.01 else "ABOVE"
    )
    report.notes.append(f"Target: at most 1/100 of a full read ({verdict}).")
    report.publish(args.json)


if __name__ == "__main__":
    main()
