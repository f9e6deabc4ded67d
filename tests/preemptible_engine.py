"""A spot cloud whose capacity gets reclaimed: an iroh-tinker ``Engine`` for recovery tests.

:class:`PreemptibleEngine` is iroh-tinker's local engine whose ranks are
killed a set time after they start, the way a spot provider reclaims its
nodes. Loaded by the real ``JobManager`` through
``module=tests.preemptible_engine:PreemptibleEngine``.

The time comes from the spec's ``envs``: ``FAKE_PREEMPT="spot=4,backup=9"``
preempts the part of provider ``spot`` 4 s after its ranks start and that of
``backup`` after 9 s; other providers are never preempted. ``spot=step``
preempts it as soon as the job logs a step after its ranks start (every rank is
up and connected: a loss at start that takes no other rank with it; a peer lost
before the others connected to it takes them down with connection errors, at a
time that depends on the machine's load). Each part folder
is preempted once (a ``preempted`` file marks it), so capacity that comes
back after a quarantine stays up. At the set time a small detached process
appends ``preempted: spot capacity reclaimed by <target>`` to each rank's log
(the cause a check reports), writes the epoch time of the loss into
``preempted`` (what the benchmark measures from) and SIGKILLs the rank's
process group.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from iroh_tinker.cloud.engines.local import LocalEngine

PREEMPT_ENV = "FAKE_PREEMPT"
MARKER = "preempted"

# the detached process that reclaims the capacity: wait (a time, or the job's next step), then
# kill the ranks it was given
_RECLAIM = """
import glob, json, os, signal, sys, time
plan = json.loads(sys.argv[1])
def launch_of(pid):
    try:
        items = open(f"/proc/{pid}/environ", "rb").read().split(b"\\0")
    except OSError:
        return None
    env = dict(item.decode(errors="replace").split("=", 1) for item in items if b"=" in item)
    return env.get("ELASTICGRID_LAUNCH_ID")
def stepped(sizes):
    return any(os.path.getsize(log) > sizes.get(log, 0) for log in glob.glob(plan["steps"]))
if plan["after_s"] is None:  # at the job's next step, or never if its ranks go first
    while not stepped(plan["step_logs"]):
        if all(launch_of(pid) != plan["launch_id"] for pid in plan["pids"].values()):
            sys.exit(0)
        time.sleep(0.02)
else:
    time.sleep(plan["after_s"])
with open(plan["marker"], "w") as marker:  # the moment of the loss, before the kill
    marker.write(str(time.time()))
for rank, pid in plan["pids"].items():
    if launch_of(pid) != plan["launch_id"]:
        continue  # gone already, or the pid now belongs to another process
    with open(os.path.join(plan["logs"], f"rank_{rank}.log"), "a") as log:
        log.write(f"preempted: spot capacity reclaimed by {plan['target']}\\n")
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
"""


AT_STEP = "step"
"""The ``FAKE_PREEMPT`` time that means: at the job's next step (module docstring)."""


def preemption_delays(setting: str) -> dict[str, float | None]:
    """``"spot=4,backup=step"`` -> ``{"spot": 4.0, "backup": None}`` (None: at the next step)."""
    delays: dict[str, float | None] = {}
    for item in setting.split(","):
        if item.strip():
            provider, _, seconds = item.partition("=")
            delays[provider.strip()] = None if seconds.strip() == AT_STEP else float(seconds)
    return delays


class PreemptibleEngine(LocalEngine):
    """The local engine whose ranks are killed ``FAKE_PREEMPT`` seconds after they start (or at
    the job's next step)."""

    def start(self, cluster, commands, env) -> None:
        job_dir = Path(cluster.meta["job_dir"])
        job, _, provider = self.spec.name.rpartition("--")
        # global rank 0 logs the steps in its part's folder, one of the job's: their sizes
        # before these ranks start, so a step logged before the reclaimer runs counts too
        steps = job_dir.parent / f"{job}--*" / "steps.jsonl"
        step_logs = {
            str(log): log.stat().st_size for log in job_dir.parent.glob(f"{job}--*/steps.jsonl")
        }
        super().start(cluster, commands, env)
        delays = preemption_delays(self.spec.envs.get(PREEMPT_ENV, ""))
        marker = job_dir / MARKER
        if provider not in delays or marker.exists():
            return
        marker.write_text("")  # preempted once per part folder
        plan = {
            "after_s": delays[provider],
            "steps": str(steps),
            "step_logs": step_logs,
            "pids": {str(rank): int(pid) for rank, pid in cluster.meta["pids"].items()},
            "launch_id": env.get("ELASTICGRID_LAUNCH_ID"),
            "logs": str(job_dir / "logs"),
            "target": self.target,
            "marker": str(marker),
        }
        # not a process of the launch: a stop of the job must not count it as a rank
        quiet = {k: v for k, v in os.environ.items() if not k.startswith("ELASTICGRID_")}
        subprocess.Popen(
            [sys.executable, "-c", _RECLAIM, json.dumps(plan)],
            env=quiet,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            start_new_session=True,
        )


class SlowProvisionEngine(LocalEngine):
    """The local engine whose provisioning takes ``FAKE_PROVISION_S`` seconds (from ``envs``)."""

    def provision(self, job_dir: str):
        time.sleep(float(self.spec.envs.get("FAKE_PROVISION_S", "0") or 0))
        return super().provision(job_dir)
