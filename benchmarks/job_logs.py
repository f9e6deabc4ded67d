"""What the restart benchmarks read from a real job: its step log, and its ranks' logs.

Both sides of a restart benchmark (the provider and the bare iroh-tinker
restart) are timed from the step log that global rank 0 writes in the
``onprem`` part; a side whose ranks log no step did not really run, and
:func:`wait_for_step` fails saying so, with the end of every rank's log.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from benchmarks.report import fail

RANK_ZERO_PART = "onprem"  # the provider that holds global rank 0 in every benchmark grid


def read_steps(jobs_root: Path, job: str) -> list[dict]:
    """Every step the job logged (global rank 0 runs in the ``onprem`` part)."""
    path = jobs_root / f"{job}--{RANK_ZERO_PART}" / "steps.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def rank_log_tails(jobs_root: Path, parts: Iterable[str], lines: int = 4) -> str:
    """The last ``lines`` (not blank) of each rank's log in ``parts``: why ranks logged no step."""
    tails = []
    for part in parts:
        for log in sorted((jobs_root / part / "logs").glob("rank_*.log")):
            text = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
            tails.append(f"{part} {log.stem}: " + (" | ".join(text[-lines:]) or "(empty)"))
    return "; ".join(tails) or "no rank log at all"


def wait_for_step(
    what: str,
    jobs_root: Path,
    job: str,
    parts: Iterable[str],
    condition: Callable[[dict], bool],
    timeout: float = 180.0,
    running: Callable[[], bool] = lambda: True,
) -> list[dict]:
    """Wait until the job logs a step meeting ``condition``; the step log then.

    When ``running()`` turns false (the ranks exited) or on timeout, fail
    naming ``what`` and quoting the ranks' logs of ``parts``.
    """
    deadline = time.monotonic() + timeout
    while True:
        steps = read_steps(jobs_root, job)
        if any(condition(step) for step in steps):
            return steps
        if not running():
            why = "its ranks exited first"
        elif time.monotonic() > deadline:
            why = f"not within {timeout:.0f} s"
        else:
            time.sleep(0.05)
            continue
        fail(
            f"{what} did not really run: it logged no step ({why}); the ranks' logs end "
            f"with: {rank_log_tails(jobs_root, parts)}"
        )


def resumed_gap(steps: list[dict], restarted_at: float, nodes: int, side: str) -> float:
    """Seconds from the last step before ``restarted_at`` to the first after it at ``nodes``.

    Fails unless the job resumed from its checkpoint: the first step after
    must follow the last one before (at most one, logged after its commit,
    can be missing).
    """
    before = [s for s in steps if s["time"] <= restarted_at]
    after = [s for s in steps if s["time"] > restarted_at and s["nodes"] == nodes]
    if not before or not after:
        fail(f"{side}: no step on both sides of the restart at {restarted_at:.2f}")
    last, first = before[-1], after[0]
    if not last["step"] < first["step"] <= last["step"] + 2:
        fail(
            f"{side}: after the restart the job logged step {first['step']}, but the last "
            f"step before it was {last['step']}: it did not resume from its checkpoint"
        )
    return float(first["time"] - last["time"])
