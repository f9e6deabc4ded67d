"""One real deployment per session (integration/deployment.py), always stopped at the end.

The fixture starts Postgres, Redis and Airflow (CeleryExecutor, two workers),
waits for the DAGs, and stops every process it started, by PID, and removes
its folder, whether the tests pass or fail (also on Ctrl-C). The suite's
duration is printed at the end.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from integration.deployment import Deployment

STARTED = time.monotonic()
DAG_IDS = [
    "elastic_training",
    "elastic_rescale_check",
    "it_deferrable_launch",
    "it_deferrable_sensor",
    "it_deferred_sensor",
    "it_launch_on_w1",
    "it_check_on_w2",
    "it_descriptor_probe",
]


@pytest.fixture(scope="session")
def deployment() -> Iterator[Deployment]:
    """The running deployment, with every DAG registered and unpaused."""
    started = time.monotonic()
    running = Deployment.start()
    try:
        running.wait_for_dags(DAG_IDS)
        print(f"\ndeployment up in {time.monotonic() - started:.0f}s under {running.home}")
        yield running
    finally:
        running.stop()


def pytest_terminal_summary(terminalreporter) -> None:
    """Print how long the whole suite took (start-up and tear-down included)."""
    terminalreporter.write_line(f"integration suite: {time.monotonic() - STARTED:.0f}s")
