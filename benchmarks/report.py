"""What every benchmark shares: its command line, its report, and a clear failure.

Every ``benchmarks/bench_*.py`` takes ``--quick`` (one round, small sizes: what
CI runs) and ``--json FILE`` (its :class:`Report`, which ``make bench`` turns
into ``docs/performance.md``). It prints its figures as Markdown tables, as
ratios against a baseline measured side by side in the same run, and fails
with :func:`fail` (one sentence, exit status 1) when either side did not
really run: a ratio against a baseline that crashed would be a made-up figure.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NoReturn, TypeVar

Result = TypeVar("Result")
STARTED = time.monotonic()  # a benchmark imports this module first: its run time starts here


class BenchmarkFailed(SystemExit):
    """A benchmark could not produce a true figure; the message says why."""


def fail(why: str) -> NoReturn:
    """Stop the benchmark: ``why`` names what did not run or did not agree."""
    raise BenchmarkFailed(f"error: {why}")


def check(condition: object, why: str) -> None:
    """:func:`fail` with ``why`` unless ``condition`` holds."""
    if not condition:
        fail(why)


def arguments(doc: str | None) -> argparse.ArgumentParser:
    """A parser with ``--quick`` and ``--json``; the benchmark adds its own options."""
    parser = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="one round at small sizes (CI): a smoke run"
    )
    parser.add_argument("--json", type=Path, help="also write the report to this JSON file")
    return parser


@dataclass
class Table:
    """A table of figures: its columns, its rows (cells already formatted)."""

    columns: list[str]
    rows: list[list[str]]

    def markdown(self) -> str:
        """The table in Markdown; a column of figures (or ``-`` for none) is right-aligned."""
        right = [
            all(row[i][:1].isdigit() or row[i].startswith("-") for row in self.rows)
            for i in range(len(self.columns))
        ]
        lines = [
            "| " + " | ".join(self.columns) + " |",
            "|" + "|".join("---:" if r else "---" for r in right) + "|",
        ]
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        return "\n".join(lines)


@dataclass
class Report:
    """One benchmark run: what it measured against what, its tables, and how it ran."""

    name: str
    title: str
    about: str
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    settings: str = ""
    quick: bool = False
    seconds: float = 0.0

    def markdown(self) -> str:
        """The report as Markdown: title, what it measures, tables, notes, how it ran."""
        parts = [f"## {self.title}", self.about, *(table.markdown() for table in self.tables)]
        parts += self.notes
        ran = f"`make bench-{self.name}`" + (" (quick)" if self.quick else "")
        parts.append(f"{ran}: {self.settings}; {self.seconds:.0f} s.")
        return "\n\n".join(parts)

    def publish(self, json_path: Path | None) -> None:
        """Print the report; write it to ``json_path`` when given."""
        self.seconds = time.monotonic() - STARTED
        print()
        print(self.markdown(), flush=True)
        if json_path is not None:
            json_path.write_text(json.dumps(asdict(self), indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> Report:
        """A report written by :meth:`publish`."""
        data = json.loads(path.read_text())
        data["tables"] = [Table(**table) for table in data["tables"]]
        return cls(**data)


def best_time(action: Callable[[], Result], repeats: int) -> tuple[float, Result]:
    """The fastest of ``repeats`` runs of ``action``, in seconds, and its last result."""
    best = float("inf")
    result: Result | None = None
    for _ in range(repeats):
        started = time.perf_counter()
        result = action()
        best = min(best, time.perf_counter() - started)
    assert result is not None
    return best, result


def wait_for_files(folder: Path, count: int, began: float, what: str, timeout: float) -> float:
    """Seconds from ``began`` (``time.monotonic()``) until ``folder`` holds ``count`` files
    (say, one marker per rank); fails naming ``what`` after ``timeout`` seconds."""
    deadline = began + timeout
    while len(list(folder.iterdir())) < count:
        check(
            time.monotonic() < deadline,
            f"{what}: only {len(list(folder.iterdir()))} of {count} ranks came up in {timeout:g} s",
        )
        time.sleep(0.01)
    return time.monotonic() - began


def ratio(numerator: float, denominator: float) -> str:
    """``numerator / denominator`` to two decimals."""
    return f"{numerator / denominator:.2f}"


def seconds_range(values: list[float]) -> str:
    """The median and, with more than one value, the range: ``3.81 (3.71-3.91)``."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    if len(ordered) == 1:
        return f"{median:.2f}"
    return f"{median:.2f} ({ordered[0]:.2f}-{ordered[-1]:.2f})"
