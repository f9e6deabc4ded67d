"""The README's example on the real deployment with every core busy: every run succeeds.

A scale check that reschedules sooner than the scheduler turns around gets failed by
Airflow 3.3.2's scheduler (apache/airflow #71172, docs/deploying.md); the example
checks in poke mode, and the sensor never reschedules under ``MIN_RESCHEDULE_S``. Ten
runs of ``elastic_training`` (short jobs: the runs queue behind each other, as the DAG
allows one at a time) while one busy process per core competes with the scheduler, the
workers and the ranks.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from integration.deployment import Deployment, wait_until

RUNS = 10  # two of three failed before the fix: ten passing runs by luck, (1/3)**10, 1 in 59,000


@contextmanager
def cpu_load() -> Iterator[list[int]]:
    """One busy process per core for the duration; each stopped by its pid at the end."""
    burners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 2)
    ]
    try:
        yield [burner.pid for burner in burners]
    finally:
        for burner in burners:
            burner.kill()
            burner.wait(timeout=30)


@pytest.mark.long
def test_the_example_succeeds_ten_times_under_cpu_load(deployment: Deployment):
    started = time.monotonic()
    with cpu_load():
        run_ids = [
            deployment.trigger("elastic_training", {"job_name": f"it-load-{n}", "steps": 12})
            for n in range(RUNS)
        ]

        def all_ended() -> bool:
            deployment.check_alive()
            states = [deployment.run_state("elastic_training", run_id) for run_id in run_ids]
            return all(state in ("success", "failed") for state in states)

        wait_until(f"{RUNS} elastic_training runs ended", all_ended, timeout=RUNS * 240, interval=5)
    elapsed = time.monotonic() - started
    outcomes = {run_id: deployment.task_states("elastic_training", run_id) for run_id in run_ids}
    bad = {"failed", "upstream_failed"}
    failed = {run_id: states for run_id, states in outcomes.items() if bad & set(states.values())}
    assert not failed, (failed, deployment.diagnostics())
    for run_id in run_ids:
        assert deployment.run_state("elastic_training", run_id) == "success"
        # the check ran in poke mode: one try, never rescheduled
        check = deployment.task_instances("elastic_training", run_id)["scale_check"]
        assert check["try_number"] == 1
    print(f"\n{RUNS} elastic_training runs under CPU load: all succeeded in {elapsed:.0f}s")
