"""One real deployment per pytest worker (integration/deployment.py), always stopped at the end.

``make integration`` runs two workers, so two deployments side by side, each with its own
ports, Postgres, Redis, hosts and folders.

The fixture starts two SSH training hosts (network namespaces with their own
sshd, ``tests/ssh_hosts.py``) that cannot see the deployment's folder (so not
its jobs root) and share a pool folder at ``/srv/pool``, then Postgres, Redis
and Airflow (CeleryExecutor, two workers), with the ``elasticgrid_ssh``
connection naming the hosts as provider ``onprem``. It waits for the DAGs, and
stops every process it started, by PID, removes its folders and the hosts'
namespaces, whether the tests pass or fail (also on Ctrl-C). The suite's
duration is printed at the end.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from integration.deployment import Deployment
from tests.ssh_hosts import POOL_MOUNT, SshTestHosts

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
    "it_printing_envs",
    "it_ssh_training",
    "it_ec2_training",
    "it_ec2_deferred",
    "it_fleet_w1",
    "it_fleet_w2",
    "elastic_fleet",
]
FLEET_PROVIDER = "fleet"
FLEET_GRID = [
    {
        "name": FLEET_PROVIDER,
        "engine": "local",
        "max_nodes": 4,
        "cost_per_node_hour": 0.0,
        "spot": False,
    }
]


@pytest.fixture(scope="session")
def deployment() -> Iterator[Deployment]:
    """The running deployment, with every DAG registered and unpaused."""
    started = time.monotonic()
    home = Path(tempfile.mkdtemp(prefix="elasticgrid-integration-"))
    pool = Path(tempfile.mkdtemp(prefix="elasticgrid-pool-"))
    try:
        with SshTestHosts(2, hide=[home], pool=pool) as hosts:
            connections = {
                "AIRFLOW_CONN_ELASTICGRID_SSH": _ssh_grid(hosts, home),
                "AIRFLOW_CONN_ELASTICGRID_DEFAULT": _fleet_grid(home),
            }
            running = Deployment.start(home, connections)
            running.ssh_hosts = hosts
            try:
                running.wait_for_dags(DAG_IDS)
                print(f"\ndeployment up in {time.monotonic() - started:.0f}s under {running.home}")
                yield running
            finally:
                running.stop()
    finally:
        shutil.rmtree(pool, ignore_errors=True)


def _ssh_grid(hosts: SshTestHosts, home: Path) -> str:
    """The ``elasticgrid_ssh`` connection: the hosts as provider ``onprem``, one node each."""
    provider = {
        "name": "onprem",
        "engine": "ssh",
        "max_nodes": hosts.count,
        "cost_per_node_hour": 0.0,
        "spot": False,
        "params": hosts.params(shared_dir=f"{POOL_MOUNT}/eg"),
    }
    extra = {"jobs_root": str(Deployment(home=home).jobs_root), "providers": [provider]}
    return json.dumps({"conn_type": "elasticgrid", "extra": extra})


def _fleet_grid(home: Path) -> str:
    """The ``elasticgrid_default`` connection: the jobs root, and :data:`FLEET_GRID`."""
    extra = {"jobs_root": str(Deployment(home=home).jobs_root), "providers": FLEET_GRID}
    return json.dumps({"conn_type": "elasticgrid", "extra": extra})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that do not use a deployment run first, before one starts: its scheduler,
    workers and triggerer would load the machine under them (a third of the Postgres outage
    test's time went to that). Then the ``long`` ones, so that no worker ends alone with one.
    A stable sort: every xdist worker collects the same order."""
    items.sort(
        key=lambda item: (
            "deployment" in getattr(item, "fixturenames", ()),
            item.get_closest_marker("long") is None,
        )
    )


def pytest_terminal_summary(terminalreporter) -> None:
    """Print how long the whole suite took (start-up and tear-down included)."""
    terminalreporter.write_line(f"integration suite: {time.monotonic() - STARTED:.0f}s")
