"""Test session setup: a private Airflow home with a real SQLite metadata DB.

The environment is set here, before anything imports Airflow, so no test ever
touches the developer's own ``AIRFLOW_HOME`` or iroh-tinker job folder. The
database is migrated once per session, and only when a test asks for it.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
SESSION_HOME = Path(tempfile.mkdtemp(prefix="elasticgrid-tests-"))

os.environ.update(
    {
        "AIRFLOW_HOME": str(SESSION_HOME / "airflow"),
        # one key for every process of the session: Variables that an `airflow dags test`
        # subprocess encrypts must decrypt in this process
        "AIRFLOW__CORE__FERNET_KEY": base64.urlsafe_b64encode(os.urandom(32)).decode(),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(TESTS / "dags"),
        "AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS": "True",
        "IROH_TINKER_HOME": str(SESSION_HOME / "iroh"),
        "IROH_TINKER_RESTART_BACKOFF": "0",
    }
)
os.environ.pop("AIRFLOW_CONN_ELASTICGRID_DEFAULT", None)


def airflow_command() -> list[str]:
    """The ``airflow`` CLI of the interpreter running the tests."""
    script = Path(sys.executable).with_name("airflow")
    return [str(script)] if script.exists() else [sys.executable, "-m", "airflow"]


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """Migrate the session's SQLite metadata DB once; returns the Airflow home."""
    result = subprocess.run(
        [*airflow_command(), "db", "migrate"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return Path(os.environ["AIRFLOW_HOME"])


@pytest.fixture
def jobs_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private JobManager root, configured through the ``elasticgrid_default`` connection.

    Any job still running at the end of the test is stopped, so no test leaves
    processes behind.
    """
    root = tmp_path / "jobs"
    root.mkdir()
    monkeypatch.setenv(
        "AIRFLOW_CONN_ELASTICGRID_DEFAULT",
        json.dumps({"conn_type": "elasticgrid", "extra": {"jobs_root": str(root)}}),
    )
    yield root
    from iroh_tinker.cloud import JobManager

    manager = JobManager(root=root)
    for state in manager.jobs():
        if manager.status(state.name).status == "running":
            manager.stop(state.name)


@pytest.fixture(scope="session", autouse=True)
def _remove_session_home() -> Iterator[None]:
    yield
    shutil.rmtree(SESSION_HOME, ignore_errors=True)
