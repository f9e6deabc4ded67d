"""Benchmark: the first scale check of a long-running job, full read against tail read.

Run with ``python benchmarks/bench_step_log.py [--lines N] [--window W]``. It
writes a step log of ``N`` lines (default 1,000,000, as the reporter writes
them) to a temporary folder and reads it twice with
:func:`~elasticgrid_provider.core.step_log.read_step_log`:

* **full read**: from the start (``cursor=LogCursor()``), as every first check
  did before; it parses every line;
* **tail read**: a first check (``cursor=None``, ``tail=W``), which reads from
  the end only as far back as the window of ``W`` samples needs.

Both must end at the same cursor offset and the tail's samples must be the
full read's newest ``W``. It prints time (best of a few repeats) and bytes
read for each, and the tail/full ratios; the target is at most 1/100 of a
full read. Figures, not asserts: the machine's load moves the times.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from bench_planner import best_time

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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000, help="lines in the step log")
    parser.add_argument("--window", type=int, default=10, help="the window size (samples)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-step-log-") as folder:
        path = Path(folder) / "steps.jsonl"
        started = time.perf_counter()
        write_log(path, args.lines)
        size = path.stat().st_size
        print(
            f"step log: {args.lines:,} lines, {size / 1e6:.1f} MB "
            f"(written in {time.perf_counter() - started:.1f}s); window {args.window} samples"
        )
        full_s, full = best_time(lambda: read_step_log(path, LogCursor()), 1)
        tail_s, tail = best_time(lambda: read_step_log(path, None, tail=args.window), REPEATS)
        if tail.cursor.offset != full.cursor.offset:
            raise SystemExit("error: the tail read and the full read end at different offsets")
        if tail.samples != full.samples[-args.window :]:
            raise SystemExit("error: the tail read did not return the newest samples")
        rows = [
            ("read", "samples", "lines parsed", "bytes read", "seconds"),
            ("full", f"{len(full.samples):,}", f"{full.lines_read:,}", f"{full.bytes_read:,}",
             f"{full_s:.3f}"),
            ("tail (first check)", f"{len(tail.samples):,}", f"{tail.lines_read:,}",
             f"{tail.bytes_read:,}", f"{tail_s:.6f}"),
        ]  # fmt: skip
        widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
        for row in rows:
            print(
                "  ".join(
                    cell.ljust(width) if column == 0 else cell.rjust(width)
                    for column, (cell, width) in enumerate(zip(row, widths, strict=True))
                )
            )
        byte_ratio = tail.bytes_read / full.bytes_read
        time_ratio = tail_s / full_s
        verdict = "within" if max(byte_ratio, time_ratio) <= 0.01 else "ABOVE"
        print(
            f"tail / full: bytes 1/{1 / byte_ratio:,.0f}, time 1/{1 / time_ratio:,.0f} "
            f"({verdict} the 1/100 target)"
        )


if __name__ == "__main__":
    main()
