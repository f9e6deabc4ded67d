"""Looking at the real rank processes of an iroh-tinker job part from a test."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def rank_pids(jobs_root: Path, part: str) -> list[int]:
    """The pids iroh-tinker recorded for the part's ranks."""
    state = json.loads((jobs_root / part / "job.json").read_text())
    return [int(pid) for pid in state["pids"].values()]


def is_alive(pid: int) -> bool:
    """True while the process runs; a zombie (exited, not yet reaped) is not alive."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def wait_for_lines(path: Path, count: int, timeout: float = 60.0) -> None:
    """Wait until a job's step log has ``count`` lines (its first steps have run)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= count:
            return
        time.sleep(0.2)
    raise AssertionError(f"{path} did not reach {count} lines in {timeout}s")
