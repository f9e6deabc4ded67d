"""Run every benchmark through its make target; write ``docs/performance.md`` from their reports.

``make bench`` runs this; ``make bench-quick`` (CI) runs it with ``--quick``,
which runs each benchmark at small sizes (but those whose quick run is a test of
``make test``: :data:`QUICK_RUN_IN_TESTS`) and writes nothing. Every
``benchmarks/bench_<name>.py`` is a benchmark, run as ``make bench-<name>``
(``_`` spelled ``-``) with ``BENCH_ARGS="--json FILE [--quick]"``, so it sets
itself up (Python extras, Debian packages) exactly as when run alone. A
benchmark that fails (it crashed, or its baseline did not really run) fails
the whole run once the others have run, naming it; the page is written only
when every benchmark passed, so each figure on it comes from one run of this
command.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.report import Report  # noqa: E402

PAGE = ROOT / "docs" / "performance.md"
ORDER = ("planner", "step-log", "policy", "resize", "recovery", "remote", "ec2", "fleet", "pages")
QUICK_RUN_IN_TESTS = ("fleet",)
"""Benchmarks whose quick run is a test of ``make test`` (``tests/benchmarks/``), which
asserts its report: ``--quick`` leaves them out, so CI does not run them twice."""
TIMEOUT_S = {True: 900, False: 4 * 3600}  # per benchmark, quick or not
STOP_GRACE_S = 90  # a benchmark interrupted on timeout stops what it started


def benchmark_names() -> list[str]:
    """Every ``bench_<name>.py`` as ``<name>`` (``-`` for ``_``), in the page's order."""
    found = {path.stem.removeprefix("bench_").replace("_", "-")
             for path in (ROOT / "benchmarks").glob("bench_*.py")}  # fmt: skip
    return sorted(
        found, key=lambda name: (ORDER.index(name) if name in ORDER else len(ORDER), name)
    )


@dataclass
class Outcome:
    """How one benchmark ran: its report (when it wrote one), its output, its exit status."""

    name: str
    status: int
    seconds: float
    output: str
    report: Report | None


def run(name: str, make: str, quick: bool, folder: Path) -> Outcome:
    """``make bench-<name>`` with the report going to ``folder``; its output passes through."""
    report_path = folder / f"{name}.json"
    bench_args = f"--json {report_path}" + (" --quick" if quick else "")
    command = [make, "--no-print-directory", f"bench-{name}", f"BENCH_ARGS={bench_args}"]
    print(f"\n=== make bench-{name}{' (quick)' if quick else ''}", flush=True)
    began = time.monotonic()
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,  # its own process group: interrupted as a whole on timeout
    )  # fmt: skip
    lines: list[str] = []
    reader = threading.Thread(target=_pass_through, args=(process, lines), daemon=True)
    reader.start()
    status = _finish(process, began + TIMEOUT_S[quick], name)
    reader.join(timeout=10)
    report = Report.load(report_path) if status == 0 and report_path.exists() else None
    return Outcome(name, status, time.monotonic() - began, "".join(lines), report)


def _pass_through(process: subprocess.Popen, lines: list[str]) -> None:
    """Print the benchmark's output as it comes, and keep it."""
    assert process.stdout is not None
    for line in process.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        lines.append(line)


def _finish(process: subprocess.Popen, deadline: float, name: str) -> int:
    """Its exit status; past the deadline, interrupt it (SIGINT: it stops what it started)."""
    try:
        return process.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    print(f"error: make bench-{name} ran past its time limit: interrupting it", flush=True)
    os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return 124


def commit() -> str:
    """The commit the figures come from, marked when the work tree differs from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        changes = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT,
                                 capture_output=True, text=True, check=True).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "an unknown commit (not a git checkout)"
    changed = [line for line in changes.splitlines() if not line.endswith(PAGE.name)]
    return f"commit `{head}`" + (" with uncommitted changes" if changed else "")


def section(outcome: Outcome) -> str:
    """The page's section for one benchmark: its report, or its output if it wrote none."""
    if outcome.report is not None:
        return outcome.report.markdown()
    tail = "\n".join(outcome.output.strip().splitlines()[-40:])
    return (
        f"## make bench-{outcome.name}\n\nThis benchmark does not write a report yet "
        f"(`--json`): its output, as printed.\n\n```\n{tail}\n```"
    )


def page(outcomes: list[Outcome], seconds: float, load: float) -> str:
    """The whole of ``docs/performance.md``."""
    day = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    cores = os.cpu_count() or 0
    head = (
        "# Performance\n\n"
        f"Generated by `make bench` from {commit()}, on a machine with {cores} CPU cores "
        f"(load average {load:.1f} at the start), on {day}, in {seconds / 60:.0f} minutes. "
        "Do not edit it by hand: run `make bench` again.\n\n"
        "Each figure is a ratio against a baseline measured side by side in the same run; "
        "seconds are given for scale and move with the machine and its load. How the "
        "benchmarks work, how to run one alone, and what CI checks: "
        "[benchmarks.md](benchmarks.md)."
    )
    text = "\n\n".join([head, *(section(outcome) for outcome in outcomes)]) + "\n"
    for machine_path, shown in ((f"{ROOT}{os.sep}", ""), (tempfile.gettempdir(), "$TMPDIR")):
        text = text.replace(machine_path, shown)  # no path of this machine on the page
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one round; no page")
    parser.add_argument("--make", default="make", help="the make program (make passes $(MAKE))")
    parser.add_argument(
        "--only", nargs="+", metavar="NAME", help="these benchmarks only (with --quick)"
    )
    args = parser.parse_args()
    unknown = sorted(set(args.only or ()) - set(benchmark_names()))
    if unknown or (args.only and not args.quick):
        what = f"no benchmark {', '.join(unknown)}" if unknown else "--only needs --quick"
        print(f"error: {what} (benchmarks: {', '.join(benchmark_names())})", file=sys.stderr)
        return 2
    began = time.monotonic()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-reports-") as folder:
        names = [n for n in benchmark_names() if not (args.quick and n in QUICK_RUN_IN_TESTS)]
        names = [n for n in names if n in (args.only or names)]
        outcomes = [run(name, args.make, args.quick, Path(folder)) for name in names]
    seconds = time.monotonic() - began
    print(f"\n=== {'quick ' if args.quick else ''}benchmarks: {seconds:.0f} s in all")
    for outcome in outcomes:
        verdict = "ok" if outcome.status == 0 else f"FAILED (exit status {outcome.status})"
        print(f"  bench-{outcome.name:<10} {outcome.seconds:6.0f} s  {verdict}")
    failed = [outcome.name for outcome in outcomes if outcome.status != 0]
    if failed:
        print(f"error: {', '.join('bench-' + name for name in failed)} failed: see above"
              + ("" if args.quick else f"; {PAGE.relative_to(ROOT)} left as it was"))  # fmt: skip
        return 1
    if not args.quick:
        PAGE.write_text(page(outcomes, seconds, load))
        print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
