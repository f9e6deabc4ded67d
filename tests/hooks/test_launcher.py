"""The launcher process: no rank, and no ``setup`` command, holds a descriptor of the task.

Airflow's task supervisor gives the task process sockets as its standard
streams (fd 0 is its channel to the supervisor). The probe below is such a
process: fd 0 and fd 9 are socketpair ends, fd 1 and 2 are pipes to this
test. It launches a real two-part job on the local engine through the hook,
with a ``setup`` command that reports its own descriptors, then exits while
the job keeps running. Every rank's ``/proc/<pid>/fd`` must then be free of
the probe's descriptors, and so must the setup command's report.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from elasticgrid_provider.engines.remote_agent import process_environment
from elasticgrid_provider.hooks.launcher import launch_processes
from tests.conftest import TESTS
from tests.dag_settings import SLEEPING_RUN, TWO_LOCAL_PROVIDERS
from tests.job_processes import job_ranks, stop_job_processes

PROBE = """
import json, os, socket, sys
from elasticgrid_provider.core.launch_spec import LaunchOptions
from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.providers import providers_from_dicts
from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook

jobs_root, providers, run, setup, report, private = sys.argv[1:7]
os.environ.update(json.loads(private))  # as the task runner does, once Airflow is imported
supervisor, task = socket.socketpair()
other_supervisor, other_task = socket.socketpair()
os.dup2(task.fileno(), 0)                      # like the supervisor's channel
os.dup2(other_task.fileno(), 9, inheritable=True)
held = sorted({os.readlink(f"/proc/self/fd/{fd}") for fd in (0, 1, 2, 9)})
placement = GridPlanner(providers=providers_from_dicts(json.loads(providers))).plan(3)
options = LaunchOptions(
    run=run, setup=setup, recovery={"mode": "none"}, envs={"FD_REPORT": report}
)
manager = ElasticGridHook(jobs_root=jobs_root).launch_manager("fds")
outcome = manager.launch(placement, options, startup_grace_s=1)
print(json.dumps({"held": held, "launch_id": outcome.snapshot.manifest.launch_id}), flush=True)
"""

FD_REPORT = """
import json, os
names = []
for fd in os.listdir("/proc/self/fd"):
    try:
        names.append(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        pass
with open(os.environ["FD_REPORT"], "a") as report:
    report.write(json.dumps(names) + "\\n")
"""


# what Airflow's task runner puts in a running task's environment, for itself only
TASK_RUNNER_PRIVATE = {
    "__AIRFLOW_SUPERVISOR_FD": "0",
    "_AIRFLOW_FORK_EXEC": "1",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "airflow-db-not-allowed:///",
    "AIRFLOW__CORE__SQL_ALCHEMY_CONN": "airflow-db-not-allowed:///",
}


def _descriptors(pid: int) -> set[str]:
    names = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            names.add(os.readlink(fd))
    return names


def test_no_rank_nor_setup_command_holds_a_descriptor_of_the_launching_task(jobs_root, tmp_path):
    reporter = tmp_path / "fd_report.py"
    reporter.write_text(FD_REPORT)
    report = tmp_path / "setup-descriptors.txt"
    try:
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                PROBE,
                str(jobs_root),
                json.dumps(TWO_LOCAL_PROVIDERS),
                SLEEPING_RUN,
                f"{sys.executable} {reporter}",
                str(report),
                json.dumps(TASK_RUNNER_PRIVATE),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=TESTS.parent,
            check=False,
        )
        assert probe.returncode == 0, probe.stderr[-3000:]
        answer = json.loads(probe.stdout.strip().splitlines()[-1])
        held = set(answer["held"])
        assert len([name for name in held if name.startswith("socket:")]) == 2
        assert len([name for name in held if name.startswith("pipe:")]) >= 1

        ranks = job_ranks("fds")
        assert len(ranks) == 3  # the job outlived the process that launched it
        processes = launch_processes("fds", [answer["launch_id"]])
        assert set(ranks) <= set(processes) and len(processes) >= 6  # runners + commands
        for pid in processes:
            leaked = _descriptors(pid) & held
            assert not leaked, f"process {pid} holds the task's {sorted(leaked)}"
            assert os.readlink(f"/proc/{pid}/fd/0") == "/dev/null"
            private = set(process_environment(pid)) & set(TASK_RUNNER_PRIVATE)
            assert not private, f"process {pid} has the task runner's {sorted(private)}"

        setups = report.read_text().splitlines()
        assert len(setups) == 2  # once per part
        for line in setups:
            assert not set(json.loads(line)) & held, line
    finally:
        stop_job_processes("fds")


def _sleeps_in_group(group: int, timeout: float = 10.0) -> list[int]:
    """Pids (as seen here) of the ``sleep`` processes in process group ``group``, once started."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = []
        for entry in Path("/proc").iterdir():
            with contextlib.suppress(OSError, ValueError):
                comm = (entry / "comm").read_text()
                if comm == "sleep\n" and os.getpgid(int(entry.name)) == group:
                    found.append(int(entry.name))
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError(f"no sleep started in process group {group}")


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare"
)
def test_launch_processes_counts_only_processes_of_its_own_pid_namespace():
    """A rank on a host in a PID namespace of its own (an SSH test host) shows in /proc here too,
    with the launch's variables; it must not be taken for a local rank (its pid means nothing
    to its host)."""
    environment = {**os.environ, "ELASTICGRID_JOB": "ns-job", "ELASTICGRID_LAUNCH_ID": "L1"}
    prefixes = {"here": [], "namespaced": ["unshare", "--pid", "--fork", "--mount-proc"]}
    started = {
        name: subprocess.Popen([*prefix, "sleep", "60"], env=environment, start_new_session=True)
        for name, prefix in prefixes.items()
    }
    try:
        sleeps = {name: _sleeps_in_group(process.pid) for name, process in started.items()}
        found = launch_processes("ns-job", ["L1"])
        assert set(sleeps["here"]) <= set(found)
        assert not set(sleeps["namespaced"]) & set(found), (sleeps, found)
    finally:
        for process in started.values():
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
