"""Looking at the real rank processes of an iroh-tinker job part from a test."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

SESSION_VARIABLE = "ELASTICGRID_TEST_SESSION"
"""Set by tests/conftest.py to the session's temp folder; ranks inherit it."""


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


def _session_ranks() -> Iterator[tuple[int, bytes, dict[str, str]]]:
    """Every live iroh-tinker runner (rank) of this test session: pid, command line, environment.

    Found in ``/proc``, not in iroh-tinker's records, so ranks it never recorded
    count too; only in this PID namespace (a rank on an SSH test host lives in
    its host's namespace, and its host's sshd ends it). Ranks started by another test session (another pytest-xdist
    worker, or another checkout's run on this machine) are told apart by the
    session marker every process of a session inherits (``SESSION_VARIABLE``).
    """
    ours = os.environ.get(SESSION_VARIABLE)
    namespace = os.readlink("/proc/self/ns/pid")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes().split(b"\0")
            if os.readlink(entry / "ns" / "pid") != namespace:  # an SSH test host's rank
                continue
        except OSError:
            continue
        if b"iroh_tinker.cloud.runner" not in command:
            continue
        variables = dict(item.decode().split("=", 1) for item in environ if b"=" in item)
        if variables.get(SESSION_VARIABLE, ours) == ours and is_alive(int(entry.name)):
            yield int(entry.name), command, variables


def job_ranks(job: str) -> dict[int, str]:
    """Every live rank process of ``job`` in this session, tracked or not: pid -> launch id."""
    return {
        pid: variables.get("ELASTICGRID_LAUNCH_ID", "")
        for pid, _, variables in _session_ranks()
        if variables.get("ELASTICGRID_JOB") == job
    }


def _kill_groups(pids: Iterable[int]) -> None:
    """SIGKILL each rank's process group (the rank and the command it runs)."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)


def stop_job_processes(job: str) -> None:
    """Kill every process of ``job`` left on this machine (test clean-up)."""
    _kill_groups(job_ranks(job))


def stop_ranks_under(jobs_root: Path) -> None:
    """Kill every rank of this session whose job folder is under ``jobs_root`` (test clean-up).

    Catches ranks iroh-tinker never recorded, e.g. of a launch killed mid-start.
    """
    marker = f"{jobs_root}/".encode()
    _kill_groups(pid for pid, command, _ in _session_ranks() if marker in command)


def stop_job(jobs_root: Path | str, job_name: str, reason: str = "stopped on request") -> Any:
    """Stop every part of a job through the provider's own stop (test and benchmark clean-up;
    :func:`elasticgrid_provider.hooks.launch_stop.stop_job`): recorded ``stopping`` before,
    ``stopped`` (``reason``) after; a launch already over stays so. Returns the job afterwards
    (None if unknown)."""
    from elasticgrid_provider.core.errors import JobNotFoundError
    from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook
    from elasticgrid_provider.hooks.launch_stop import stop_job as stop

    store = ElasticGridHook(jobs_root=str(jobs_root)).job_store
    try:
        stop(store, job_name, reason)
    except JobNotFoundError:
        return None
    return store.job_snapshot(job_name)
